FROM python:3.11-slim-bookworm

# Debian's Chromium headless shell (Playwright drives it through executable_path) and tini to
# reap its children.
RUN apt-get update \
 && apt-get install -y --no-install-recommends chromium-headless-shell tini fonts-liberation \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 10001 snapshotd \
 && mkdir /data && chown snapshotd /data
WORKDIR /app
COPY pyproject.toml README.md ./
COPY snapshotd ./snapshotd
COPY rules ./rules
RUN pip install --no-cache-dir .

USER snapshotd
ENV SNAPSHOTD_CHROMIUM=/usr/bin/chromium-headless-shell \
    SNAPSHOTD_DB=/data/snapshotd.db \
    SNAPSHOTD_HOST=0.0.0.0 \
    SNAPSHOTD_PORT=8080
VOLUME /data
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "snapshotd"]
CMD ["serve"]
