# agentgate on the current Node LTS. Node 24 runs the TypeScript sources directly (type stripping),
# so the image carries no build output; the compiled policy artefact is committed in policies/dist.
FROM node:24-bookworm-slim
WORKDIR /app
ENV NODE_ENV=production
COPY package.json package-lock.json ./
# Dev dependencies (compiler, test runner, the pinned `node` package) and the optional opa binary
# are build-time tools; the runtime needs neither. sodium-native ships its prebuilt binary inside
# the package, so nothing is compiled or downloaded here.
RUN npm ci --omit=dev --omit=optional --no-audit --no-fund && npm cache clean --force
COPY src ./src
COPY bin ./bin
COPY config ./config
COPY policies ./policies
COPY plugins ./plugins
# Never root: the image's `node` user (uid 1000) owns nothing it could rewrite but its own files.
USER node
ENV HOST=0.0.0.0 PORT=3000
EXPOSE 3000
# Liveness only: /healthz answers while the process serves HTTP, whatever Redis does (a Redis
# outage must not restart every instance); orchestrators route traffic by /readyz.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 CMD ["node", "-e", "fetch('http://127.0.0.1:'+(process.env.PORT||3000)+'/healthz').then(r=>process.exit(r.ok?0:1)).catch(()=>process.exit(1))"]
CMD ["node", "src/main.ts"]
