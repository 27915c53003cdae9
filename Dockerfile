# dragonfarm on Hugging Face Spaces (Docker SDK): the same app, port 7860, a non-root user.
FROM python:3.11-slim

RUN useradd -m -u 1000 user
WORKDIR /home/user/app

COPY --chown=user requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt

COPY --chown=user . .
RUN pip install --no-cache-dir --no-deps -e .

USER user
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:$PATH \
    DRAGONFARM_PROFILE=spaces \
    GRADIO_ANALYTICS_ENABLED=False
EXPOSE 7860
CMD ["python", "app.py", "--host", "0.0.0.0", "--port", "7860"]
