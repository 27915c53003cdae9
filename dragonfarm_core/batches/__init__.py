"""Judge and synthesis batches as background jobs: the app starts them, a child process runs them."""
