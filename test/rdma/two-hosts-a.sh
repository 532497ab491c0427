# Host a of run-two-guests.sh (see two-hosts.sh).
IDX=1 SIDE=a
. "$(dirname "$0")/two-hosts.sh"
