"""What the supervisor measures about a running job: its process tree and its GPUs."""
