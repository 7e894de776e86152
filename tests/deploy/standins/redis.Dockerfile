# A stand-in for docker-compose.yml's redis image where no registry can be reached: Debian's
# redis-server on the local base image (scripts/base-image.sh). Like the official image, it
# runs the compose file's `redis-server ...` command in /data with protected mode off.
ARG BASE
FROM ${BASE}
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends redis-server \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data
WORKDIR /data
EXPOSE 6379
ENTRYPOINT ["sh", "-c", "if [ \"$1\" = redis-server ]; then shift; exec redis-server \"$@\" --protected-mode no; fi; exec \"$@\"", "--"]
CMD ["redis-server"]
