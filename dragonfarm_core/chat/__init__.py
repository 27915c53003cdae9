"""Chat: `generate`, conversations, and the feedback they collect."""
