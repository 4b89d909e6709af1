#!/usr/bin/env python3
"""Generate the DNS bench inputs: one set of MCS services, written as
  - services.json      what bench-dns-feed creates in kubesim (ServiceImports + MCS EndpointSlices),
  - clusterset.local.zone  the same records as a zone file for knot and hickory-dns,
  - q_a.txt, q_mix.txt, q_nx.txt  dnsperf query files.
Adapted from docs dataplane.md appendix A.7 (same shapes, seeded, scaled to --services).

Records per ClusterSetIP service: A, AAAA, _http._tcp SRV and the bare-name SRV.
Per headless service: CLUSTERS x EPS endpoints with hostnames ep<e>: the service A set,
ep<e>.cluster<c>.<svc> A, and SRV (named and bare) per endpoint.
Mix: 70% A, 10% AAAA, 10% SRV (ClusterSetIP), 5% headless A (15 RRs), 5% NXDOMAIN.
"""
import argparse, json, random

p = argparse.ArgumentParser()
p.add_argument("--services", type=int, default=10000, help="total services (ClusterSetIP + headless)")
p.add_argument("--namespaces", type=int, default=10)
p.add_argument("--headless-per-ns", type=int, default=10)
p.add_argument("--out", default=".")
a = p.parse_args()

random.seed(42)
Z = "clusterset.local."
TTL = 5
NS = a.namespaces
HL = a.headless_per_ns
CLUSTERS, EPS = 3, 5
SVC = a.services // NS - HL  # ClusterSetIP services per namespace
assert SVC > 0, "--services too small for the headless count"

z = [f"$ORIGIN {Z}", f"$TTL {TTL}",
     f"@ {TTL} IN SOA ns.dns.{Z} hostmaster.{Z} 1 7200 1800 86400 {TTL}",
     f"@ {TTL} IN NS ns.dns.{Z}", f"ns.dns {TTL} IN A 127.0.0.1",
     'dns-version 28800 IN TXT "1.0.0"']
imports, slices, qa, qmix, qnx = [], [], [], [], []
for n in range(NS):
    ns = f"ns{n}"
    for s in range(SVC):
        name = f"svc{s}.{ns}.svc"
        ip = f"10.{100 + n}.{s // 250}.{s % 250 + 1}"
        ip6 = f"fd00::{n:x}:{s:x}"
        z += [f"{name} IN A {ip}", f"{name} IN AAAA {ip6}",
              f"_http._tcp.{name} IN SRV 0 50 80 {name}.{Z}", f"{name} IN SRV 0 50 80 {name}.{Z}"]
        imports.append({"namespace": ns, "name": f"svc{s}", "type": "ClusterSetIP", "ips": [ip, ip6],
                        "ports": [{"name": "http", "protocol": "TCP", "port": 80}]})
        qa.append(f"{name}.{Z} A")
    for h in range(HL):
        hname = f"hsvc{h}.{ns}.svc"
        imports.append({"namespace": ns, "name": f"hsvc{h}", "type": "Headless", "ips": [],
                        "ports": [{"name": "http", "protocol": "TCP", "port": 80}]})
        for c in range(CLUSTERS):
            eps = []
            for e in range(EPS):
                ip = f"10.{200 + c}.{n * HL + h}.{e + 1}"
                z += [f"{hname} IN A {ip}", f"ep{e}.cluster{c}.{hname} IN A {ip}",
                      f"_http._tcp.{hname} IN SRV 0 50 80 ep{e}.cluster{c}.{hname}.{Z}",
                      f"{hname} IN SRV 0 50 80 ep{e}.cluster{c}.{hname}.{Z}"]
                eps.append({"addresses": [ip], "hostname": f"ep{e}", "conditions": {"ready": True}})
            slices.append({"namespace": ns, "service": f"hsvc{h}", "cluster": f"cluster{c}",
                           "endpoints": eps, "ports": [{"name": "http", "protocol": "TCP", "port": 80}]})

for i in range(20000):
    r = random.random(); n = random.randrange(NS); s = random.randrange(SVC); h = random.randrange(HL)
    if r < 0.70: qmix.append(f"svc{s}.ns{n}.svc.{Z} A")
    elif r < 0.80: qmix.append(f"svc{s}.ns{n}.svc.{Z} AAAA")
    elif r < 0.90: qmix.append(f"_http._tcp.svc{s}.ns{n}.svc.{Z} SRV")
    elif r < 0.95: qmix.append(f"hsvc{h}.ns{n}.svc.{Z} A")
    else: qmix.append(f"nosuch{s}.ns{n}.svc.{Z} A")
for i in range(5000):
    qnx.append(f"nosuch{random.randrange(1 << 20)}.ns{random.randrange(NS)}.svc.{Z} A")

out = a.out.rstrip("/")
open(f"{out}/clusterset.local.zone", "w").write("\n".join(z) + "\n")
json.dump({"imports": imports, "slices": slices}, open(f"{out}/services.json", "w"))
for fname, lines in (("q_a.txt", qa), ("q_mix.txt", qmix), ("q_nx.txt", qnx)):
    open(f"{out}/{fname}", "w").write("\n".join(lines) + "\n")
print(f"{len(imports)} services ({NS * HL} headless), {len(slices)} slices, {len(z)} zone lines, "
      f"{len(qa)} A / {len(qmix)} mixed / {len(qnx)} NXDOMAIN queries")
