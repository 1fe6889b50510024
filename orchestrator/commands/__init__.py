"""One module per CLI command; each imports its heavy dependencies when it runs."""
