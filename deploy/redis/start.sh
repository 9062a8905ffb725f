#!/bin/sh
# Redis for the fleet: a password is required and a placeholder is refused; the append-only
# file on /data (a volume) keeps jobs, events and batches across restarts.
set -eu
case "$(printf %s "${REDIS_PASSWORD:-}" | tr '[:upper:]' '[:lower:]')" in
  "" | changeme | change-me | secret | password | placeholder | redis)
    echo "REDIS_PASSWORD is empty or a placeholder: set a real secret in .env" >&2
    exit 2 ;;
esac
# The password goes in as config on stdin (a here-document), not argv (argv shows in `ps`);
# exec keeps redis-server as PID 1, so SIGTERM reaches it and it saves before exiting.
exec redis-server - --bind 0.0.0.0 --port 6379 --dir /data --appendonly yes --save "60 1000" \
  --protected-mode no --daemonize no <<CONF
requirepass "$REDIS_PASSWORD"
CONF
