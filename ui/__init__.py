"""The Gradio app: layout, shared context, formatting, and one module per tab.

Everything here calls the public API of `dragonfarm_core`; nothing here imports torch.
"""
