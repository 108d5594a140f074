# One image for web and workers. GPU workers build with REQUIREMENTS=requirements-gpu.txt.
FROM python:3.11-slim

ARG REQUIREMENTS=requirements.txt
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    STATIC_ROOT=/app/staticfiles OPDWEB_DATA_DIR=/data

WORKDIR /app
COPY requirements*.txt ./
RUN pip install -r ${REQUIREMENTS}

COPY . .
# Settings need a database URL to load; collectstatic touches neither database nor Redis.
RUN SECRET_KEY=build DATABASE_URL=postgres://build@localhost/build REDIS_URL=redis://localhost \
    python manage.py collectstatic --noinput -v 0

RUN useradd --create-home --uid 1000 opdweb && mkdir -p /data && chown opdweb /data
USER opdweb
EXPOSE 8000
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "opdweb.asgi:application"]
