#!/usr/bin/env bash
# Makes what deploy/compose.tls.yml mounts, in DIR (default deploy/tls/certs):
# a CA, Redis's certificate (for the host names redis and localhost; also a
# client's, as replicas and cluster peers present it),
# rankflow's client certificate, a random password for the ACL user
# rankflow, and Redis's ACL file (the default user off; rankflow limited to
# its keys, no admin or dangerous command; the password stored hashed).
# For trying TLS on one machine: in production the certificates come from
# your CA and the password from your secret store.
set -euo pipefail
dir=${1:-"$(dirname "$0")/certs"}
mkdir -p "$dir"
cd "$dir"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -days 365 -subj "/CN=rankflow CA $(openssl rand -hex 4)" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
leaf() {  # name, extensions
  printf 'basicConstraints=CA:FALSE\n%b\n' "$2" >"$1.ext"
  openssl req "${ec[@]}" -keyout "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 365 -extfile "$1.ext" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
leaf redis 'subjectAltName=DNS:redis,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth'
leaf client 'extendedKeyUsage=clientAuth'
password=$(openssl rand -hex 24)
printf '%s\n' "$password" >redis-password
hash=$(printf '%s' "$password" | sha256sum | cut -d' ' -f1)
cat >users.acl <<ACL
user default off
user rankflow on #$hash ~lb:* &* +@all -@admin -@dangerous
ACL
# The containers run as their own users (rankflow 10001, redis 999): a
# demo's files are readable by all; keep real keys to their owner.
chmod 644 ./*.crt ./*.key redis-password users.acl
rm -f ca.srl
echo "made CA, redis and client certificates, the rankflow password and users.acl in $dir"
