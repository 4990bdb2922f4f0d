"""Who may do what: roles, and the controls that enforce them."""
