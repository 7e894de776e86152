# A stand-in for docker-compose.yml's nginx image where no registry can be reached: Debian's
# nginx (and wget, which the compose healthcheck uses) on the local base image
# (scripts/base-image.sh), running the mounted /etc/nginx/nginx.conf in the foreground.
ARG BASE
FROM ${BASE}
RUN apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends nginx wget \
 && rm -rf /var/lib/apt/lists/*
EXPOSE 8080
STOPSIGNAL SIGQUIT
CMD ["nginx", "-g", "daemon off;"]
