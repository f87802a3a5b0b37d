"""What a running job sees: environment variables and folders (DESIGN.md, the contract)."""
