# Quiver in a container: builds the native engine addon and the TypeScript, then runs
# a single node with its storage under /quiver/storage.
#
# Not built or tested in this repository's CI: the build machines have no registry for
# base images. It follows the same steps as `make build` (without the WASM fallback,
# which a container with the native addon does not need).
#
#   docker build -t quiver .
#   docker run -p 6333:6333 -p 6334:6334 -v quiver-storage:/quiver/storage quiver

FROM node:20-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends curl ca-certificates build-essential \
 && rm -rf /var/lib/apt/lists/*
RUN curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain stable
ENV PATH=/root/.cargo/bin:$PATH
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm install --no-audit --no-fund
COPY . .
RUN npx napi build --release --platform --manifest-path crates/quiver-node/Cargo.toml \
      --config-path crates/quiver-node/napi.json --output-dir crates/quiver-node --no-js --dts index.d.ts \
 && npx tsc -p tsconfig.json \
 && npm prune --omit=dev

FROM node:20-bookworm-slim
WORKDIR /quiver
COPY --from=build /src/package.json ./
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY --from=build /src/bin ./bin
COPY --from=build /src/config ./config
COPY --from=build /src/proto ./proto
COPY --from=build /src/crates/quiver-node/*.node ./crates/quiver-node/
ENV SERVICE__STORAGE__STORAGE_PATH=/quiver/storage \
    SERVICE__STORAGE__SNAPSHOTS_PATH=/quiver/snapshots
# 6333: REST API; 6334: gRPC API; 6335: internal API between cluster peers (cluster.enabled).
EXPOSE 6333 6334 6335
VOLUME ["/quiver/storage", "/quiver/snapshots"]
STOPSIGNAL SIGTERM
CMD ["node", "bin/quiver"]
