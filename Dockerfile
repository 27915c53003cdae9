# dragonfarm as a Hugging Face Space (Docker SDK): the same app on port 7860 under the `spaces`
# profile, as the non-root user (uid 1000) Spaces run containers as. docs/DEPLOY.md "Hugging Face Space"
# says how to create the Space. Build arguments (a Space passes its variables as build args):
#   TORCH_INDEX_URL  where pip takes torch 2.13.0 from. Empty (the default): the default index,
#                    whose Linux wheels are CUDA builds, for a Space with a GPU (they run on a CPU
#                    too). For a CPU-only Space give PyTorch's CPU wheel index: a much smaller image.
#   LLAMA_CPP        1 (default) builds llama.cpp's converter and CPU binaries into the image, so
#                    the Export tab can write GGUF files and check their templates; 0 leaves it out.
FROM python:3.11-slim

ARG TORCH_INDEX_URL=""
ARG LLAMA_CPP=1

# tcmalloc: trainer processes preload it (about a third less peak memory when training on a CPU).
RUN apt-get update && apt-get install -y --no-install-recommends libtcmalloc-minimal4 \
    && rm -rf /var/lib/apt/lists/*

# A compiler and cmake only for llama.cpp's build (scripts/build_llama_cpp.py).
RUN if [ "$LLAMA_CPP" = "1" ]; then \
        apt-get update && apt-get install -y --no-install-recommends build-essential cmake \
        && rm -rf /var/lib/apt/lists/*; \
    fi

RUN useradd -m -u 1000 user
USER user
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1
WORKDIR /home/user/app

COPY --chown=user requirements.txt .
RUN if [ -n "$TORCH_INDEX_URL" ]; then \
        pip install --user torch==2.13.0 --index-url "$TORCH_INDEX_URL"; \
    fi \
    && pip install --user -r requirements.txt

# The code, the bundled model (assets/models/tiny-support) and the example data
# (assets/example_tickets.csv); .dockerignore keeps runs, tests and caches out.
COPY --chown=user . .
RUN pip install --user --no-deps -e . \
    && if [ "$LLAMA_CPP" = "1" ]; then python scripts/build_llama_cpp.py --portable; fi \
    && python -c "import dragonfarm_core as d; print(d.ResolvedModel.bundled().base)"

# Runs live under /data when the Space has persistent storage, else in a temporary folder (the
# header says so); HF_TOKEN comes from the Space's secrets at run time, never from the image.
ENV DRAGONFARM_PROFILE=spaces \
    GRADIO_ANALYTICS_ENABLED=False \
    HF_HUB_DISABLE_TELEMETRY=1
EXPOSE 7860
HEALTHCHECK --interval=30s --timeout=10s --start-period=120s --retries=3 \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7860/', timeout=8)"
CMD ["python", "app.py", "--host", "0.0.0.0", "--port", "7860"]
