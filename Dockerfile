# lowlat in a container: built with the dist profile (stripped), run from a distroless image
# (glibc and nothing else; no shell). Serves the embedded site on 8080 unless given a --root:
#   docker build -t lowlat .
#   docker run --rm -p 8080:8080 lowlat
#   docker run --rm -p 8080:8080 -v "$PWD/site:/site:ro" lowlat serve --listen 0.0.0.0:8080 --root /site
FROM rust:1.89-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends cmake && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --locked --profile dist -p lowlat

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/dist/lowlat /lowlat
EXPOSE 8080
ENTRYPOINT ["/lowlat"]
CMD ["serve", "--listen", "0.0.0.0:8080"]
