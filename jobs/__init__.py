"""Background jobs: run folders, the local and Ray runners, the experiment registry and the CLI."""
