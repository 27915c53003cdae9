"""The trainer side of a run: `python -m dragonfarm_core.trainers RUN_DIR`.

One module per method (sft, dpo, orpo, grpo), each with `main(run_dir)` that reads config.json
and writes status, progress and the adapter. Only these modules import torch, transformers, peft
and trl, inside their functions; this package's own import stays light, because the app and the
queued (waiting) trainer processes import it.
"""
