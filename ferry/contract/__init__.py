"""What a running job sees: environment variables and folders (docs/contract.md)."""
