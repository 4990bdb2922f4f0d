"""The workflow definitions (deterministic code only; activities do the I/O), and in
`shared` what several of them do alike."""
