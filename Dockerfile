# sprout in a container.
#   podman build --format docker -t sprout .     (or: docker build -t sprout .)
#   podman run -d -p 11300:11300 -v sprout-jobs:/var/lib/sprout sprout
# Settings are SPROUT_* variables (-e SPROUT_FSYNC_MS=0) or flags after the
# image name (a flag wins over its variable: `sprout -l 127.0.0.1` there
# replaces the 0.0.0.0 below). --format docker keeps the HEALTHCHECK, which
# the OCI image format has no field for.

ARG RUST_IMAGE=docker.io/library/rust:1-slim-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${RUST_IMAGE} AS builder
WORKDIR /src
COPY . .
# The dist profile: release without debug info, stripped, with LTO (Cargo.toml).
RUN cargo install --locked --profile dist --path . --root /out

FROM ${RUNTIME_IMAGE}
RUN useradd --system --user-group --home-dir /var/lib/sprout --shell /usr/sbin/nologin sprout \
    && install -d -o sprout -g sprout -m 0750 /var/lib/sprout
COPY --from=builder /out/bin/sprout /usr/local/bin/sprout
USER sprout
# Inside a container loopback reaches no one: listen on every interface,
# and keep the jobs in the volume.
ENV SPROUT_LISTEN=0.0.0.0 \
    SPROUT_PORT=11300 \
    SPROUT_BINLOG_DIR=/var/lib/sprout
VOLUME /var/lib/sprout
EXPOSE 11300
# Healthy once the beanstalk port answers, which is after recovery.
HEALTHCHECK --interval=10s --timeout=3s --start-period=2m \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${SPROUT_PORT} && printf 'list-tube-used\\r\\n' >&3 && IFS= read -r -t 2 line <&3 && [[ $line == USING* ]]"]
ENTRYPOINT ["/usr/local/bin/sprout"]
