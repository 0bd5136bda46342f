FROM python:3.11-slim-bookworm

# Debian's Chromium headless shell (Playwright drives it through executable_path), tini to
# reap its children, and libatomic1, which Playwright's bundled Node.js driver needs and the
# slim Python images lack.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      chromium-headless-shell tini fonts-liberation libatomic1 \
 && rm -rf /var/lib/apt/lists/*

RUN useradd --create-home --uid 10001 snapshotd \
 && mkdir /data && chown snapshotd /data
WORKDIR /app

# Dependencies first, in their own layer: a change to the code does not reinstall them.
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes -r requirements.lock

COPY pyproject.toml README.md ./
COPY snapshotd ./snapshotd
COPY rules ./rules
RUN pip install --no-cache-dir --no-deps . \
 && snapshotd --version

# Not root: Chromium runs pages in its sandbox (browser.sandbox auto; docs/SPEC.md 1.2).
USER snapshotd
ENV SNAPSHOTD_CHROMIUM=/usr/bin/chromium-headless-shell \
    SNAPSHOTD_SANDBOX=auto \
    SNAPSHOTD_DB=/data/snapshotd.db \
    SNAPSHOTD_HOST=0.0.0.0 \
    SNAPSHOTD_PORT=8080
VOLUME /data
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD python -c "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/_snapshotd/healthz' % os.environ.get('SNAPSHOTD_PORT', '8080'), timeout=4)"
ENTRYPOINT ["/usr/bin/tini", "--", "snapshotd"]
CMD ["serve"]
