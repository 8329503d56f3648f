"""Grants Kafka ACLs (ALLOW, any host) as the harness's super user over
SASL_SSL (SCRAM-SHA-512), with confluent-kafka's AdminClient, for the tests
of a broker that authorizes every request (tests/secure_refusals.rs).

Usage: grant_acls.py BOOTSTRAP CA_FILE USER PASSWORD SPEC...
  SPEC = RESOURCE:PATTERN:NAME:PRINCIPAL:OPERATION, e.g.
  TOPIC:LITERAL:*:User:rankflow:ALL (the principal holds one colon).
"""
import sys

from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

bootstrap, ca_file, user, password = sys.argv[1:5]
admin = AdminClient({
    "bootstrap.servers": bootstrap,
    "security.protocol": "SASL_SSL",
    "ssl.ca.location": ca_file,
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": user,
    "sasl.password": password,
})
bindings = []
for spec in sys.argv[5:]:
    resource, pattern, name, kind, principal, operation = spec.split(":")
    bindings.append(AclBinding(ResourceType[resource], name, ResourcePatternType[pattern],
                               f"{kind}:{principal}", "*", AclOperation[operation],
                               AclPermissionType.ALLOW))
for binding, future in admin.create_acls(bindings, request_timeout=30).items():
    future.result()
    print(f"granted {binding}")
