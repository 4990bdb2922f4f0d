"""The schedulers that place training jobs: Slurm, Kubernetes and a simulated one."""
