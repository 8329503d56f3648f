# Multi-stage build of rankflow. librdkafka is built from source by the
# rdkafka crate, so the builder needs a C toolchain, make, perl and cmake,
# and OpenSSL's and libcurl's headers (TLS, SASL, OAUTHBEARER's OIDC).
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake perl make g++ libssl-dev libcurl4-openssl-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY tools ./tools
# A workspace member (the integration tests' harness): cargo reads its manifest.
COPY tests/support ./tests/support
RUN cargo build --release --locked --bin rankflow --bin rankflow-tools

FROM debian:bookworm-slim
# ca-certificates: the system's roots, trusted when no CA file is given.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 libcurl4 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 rankflow
COPY --from=build /src/target/release/rankflow /usr/local/bin/rankflow
# The sample producer of the compose stack's demo producer (not part of the product).
COPY --from=build /src/target/release/rankflow-tools /usr/local/bin/rankflow-tools
USER rankflow
EXPOSE 9898
ENTRYPOINT ["rankflow"]
CMD ["run", "--config", "/config/rankflow.toml"]
