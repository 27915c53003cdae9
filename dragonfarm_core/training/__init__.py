"""Starting training: `train()`, `prefer()`, `reinforce()`, the preflight memory estimate, triage."""
