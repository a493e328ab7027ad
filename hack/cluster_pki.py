"""The local control plane's PKI: one CA, one admin certificate, the service-account key, the kubeconfig.

The admin certificate (``system:masters``) is the client certificate of every harness user and also the
serving certificate of kube-apiserver, kwok and add-ons that serve webhooks (addons_lws.py): its SANs are
localhost, 127.0.0.1, ::1, 10.96.0.1 (the ``kubernetes`` Service) and the ``kubernetes.default...`` names.
Files under ``pki/``: ca.crt, ca.key, admin.crt, admin.key, sa.key, sa.pub (keys are ECDSA P-256, mode 0600).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path

import yaml


def generate_pki(pki: Path) -> None:
    """CA, an admin cert (system:masters, also the serving cert of the apiserver and kwok) and an SA key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    pki.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=3650)

    def key() -> ec.EllipticCurvePrivateKey:
        return ec.generate_private_key(ec.SECP256R1())

    def write_key(k: ec.EllipticCurvePrivateKey, name: str) -> None:
        (pki / name).write_bytes(
            k.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        os.chmod(pki / name, 0o600)

    ca_key = key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ctxfit-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (pki / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    write_key(ca_key, "ca.key")

    admin_key = key()
    sans = [
        x509.DNSName(n)
        for n in (
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ] + [x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", "::1", "10.96.0.1")]
    admin = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                    x509.NameAttribute(NameOID.COMMON_NAME, "ctxfit-admin"),
                ]
            )
        )
        .issuer_name(ca_name)
        .public_key(admin_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, True, False, False, False, False, False, False), critical=True
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    (pki / "admin.crt").write_bytes(admin.public_bytes(serialization.Encoding.PEM))
    write_key(admin_key, "admin.key")

    sa_key = key()
    write_key(sa_key, "sa.key")
    (pki / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def write_kubeconfig(path: Path, server: str, pki: Path) -> None:
    """A kubeconfig (mode 0600) for `server` as the admin, context ``ctxfit``, namespace ``default``."""
    kc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "ctxfit",
                "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": "ctxfit-admin",
                "user": {
                    "client-certificate": str(pki / "admin.crt"),
                    "client-key": str(pki / "admin.key"),
                },
            }
        ],
        "contexts": [
            {
                "name": "ctxfit",
                "context": {"cluster": "ctxfit", "user": "ctxfit-admin", "namespace": "default"},
            }
        ],
        "current-context": "ctxfit",
    }
    path.write_text(yaml.safe_dump(kc, sort_keys=False))
    os.chmod(path, 0o600)


def admin_ssl_context(pki: Path) -> ssl.SSLContext:
    """TLS to the apiserver as the admin: verifies the server against ca.crt, presents admin.crt."""
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    return ctx


def unverified_ssl_context() -> ssl.SSLContext:
    """TLS without verification, for the /healthz of kube-controller-manager and kube-scheduler (which
    serve certificates they sign themselves into --cert-dir) and kwok."""
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE
    return insecure
