# Host b of run-two-guests.sh (see two-hosts.sh).
IDX=2 SIDE=b
. "$(dirname "$0")/two-hosts.sh"
