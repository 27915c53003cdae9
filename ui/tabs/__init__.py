"""One module per tab. Each has a TITLE and a `build(ctx)` that creates its widgets, then wires
its events to module-level handlers. Tabs never import each other; they share `ui.context`."""
