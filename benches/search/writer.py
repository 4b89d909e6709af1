#!/usr/bin/env python3
"""A writer-only experiment for the search store's SQLite schema (not the indexer).

Writes N Pods (10 members x N/10, shaped as bench-search's: 5 labels, owner uids,
names of ~40 characters) into a fresh SQLite file, as the indexer's writer does:
500-object batches from the members in turn, four batches per transaction, the
names' trigrams (FTS5) at the end of each transaction. Prints the CPU time per object
of this process (Python's own per-row work included, the same in every variant).

Variants (argv[1]) change one thing of the schema at version 3:
  base       the schema as it is
  col        labels as a JSON column, and one labels table keyed (key, value, rid)
  tid        an integer type id instead of (group, version, resource)
  ids        integer type and cluster ids, and `col`'s labels
  nofts      no trigram index of names
  ext        the trigram index over the resources table's names (external content), no
             sizes (columnsize=0): the names are not stored a second time
  cs0        the trigram index without its per-row sizes (columnsize=0)
  amN        the trigram index with FTS5 automerge=N (default 4)
  noowner, nocreated, norv, nons   without that index
  smallobj   a 10-byte spec instead of 900 bytes
PAGE=8192 or 16384 in the environment sets the page size.

Run: python3 benches/search/writer.py base 1000000   (Python's sqlite3: the system's
SQLite, not rusqlite's bundled one; figures in benches/results/search.md)
"""
import sqlite3, sys, time, json, random, os
variant = sys.argv[1]; N = int(sys.argv[2]) if len(sys.argv) > 2 else 100000
path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"search-writer-{variant}.db")
for s in ("", "-wal", "-shm"):
    try: os.remove(path + s)
    except FileNotFoundError: pass
c = sqlite3.connect(path, isolation_level=None)
ps = int(os.environ.get("PAGE", "4096")); c.execute(f"PRAGMA page_size={ps}"); c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA synchronous=NORMAL")
c.execute("PRAGMA cache_size=-16384"); c.execute(f"PRAGMA wal_autocheckpoint={40000*4096//ps}"); c.execute("PRAGMA temp_store=MEMORY")
g = {"ids": "tid INTEGER NOT NULL, cid INTEGER NOT NULL", "tid": "tid INTEGER NOT NULL, cluster TEXT NOT NULL"}.get(variant, "grp TEXT NOT NULL, version TEXT NOT NULL, resource TEXT NOT NULL, cluster TEXT NOT NULL")
gk = "tid" if variant in ("ids", "tid") else "grp, version, resource"
ck = "cid" if variant == "ids" else "cluster"
lab = ", labels TEXT" if variant in ("col", "ids") else ""
c.executescript(f"""
CREATE TABLE resources (id INTEGER PRIMARY KEY, {g}, namespace TEXT NOT NULL, name TEXT NOT NULL,
 uid TEXT NOT NULL, resource_version TEXT NOT NULL, rv_num INTEGER NOT NULL, owner_uid TEXT, created_at INTEGER NOT NULL{lab}, object TEXT NOT NULL,
 UNIQUE ({gk}, {ck}, namespace, name));
CREATE INDEX resources_owner ON resources ({ck}, owner_uid);
CREATE INDEX resources_created ON resources ({gk}, created_at, {ck}, namespace, name);
CREATE INDEX resources_rv ON resources ({gk}, rv_num, {ck}, namespace, name);
CREATE INDEX resources_ns ON resources ({gk}, namespace, {ck}, name);
""")
fts_opts = {"ext": ", content = 'resources', content_rowid = 'id', columnsize = 0", "cs0": ", columnsize = 0"}.get(variant, "")
c.execute(f"CREATE VIRTUAL TABLE resources_names USING fts5(name, tokenize = 'trigram', detail = 'none'{fts_opts})")
if variant.startswith("am"):
    c.execute(f"INSERT INTO resources_names(resources_names, rank) VALUES('automerge', {int(variant[2:])})")
if variant.startswith("cm"):
    c.execute(f"INSERT INTO resources_names(resources_names, rank) VALUES('crisismerge', {int(variant[2:])})")
if variant.startswith("pg"):
    c.execute(f"INSERT INTO resources_names(resources_names, rank) VALUES('pgsz', {int(variant[2:])})")
for drop, stmt in [("noowner","DROP INDEX resources_owner"),("nocreated","DROP INDEX resources_created"),("norv","DROP INDEX resources_rv"),("nons","DROP INDEX resources_ns")]:
    if variant == drop: c.execute(stmt)
if variant in ("col", "ids"):
    c.execute("CREATE TABLE labels (key TEXT NOT NULL, value TEXT NOT NULL, rid INTEGER NOT NULL, PRIMARY KEY (key, value, rid)) WITHOUT ROWID")
else:
    c.execute("CREATE TABLE labels (rid INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (rid, key)) WITHOUT ROWID")
    c.execute("CREATE INDEX labels_kv ON labels (key, value)")
WORDS="payments checkout catalog search orders billing auth profile inventory shipping ledger notify ratings pricing media gateway".split()
ROLES="api worker web sync".split(); TIERS="frontend backend cache db worker".split()
rnd = random.Random(1)
def member(m):
    rows = []
    for d in range(N // 100):
        name = f"{WORDS[d%16]}-{ROLES[(d//16)%4]}-{d}"; ns = f"ns-{d%50:02d}"
        h = "%010x" % rnd.getrandbits(40)
        labels = {"app": name, "team": f"team-{(d//7)%12}", "tier": TIERS[(d//50)%5], "version": f"v{1+(d//3)%4}", "pod-template-hash": h}
        for k in range(10):
            pn = f"{name}-{h}-{(d*10+k)*2654435761 % 2**20:05x}{k}"
            rows.append((ns, pn, d, k, labels))
    rows.sort(key=lambda r: (r[0], r[1]))
    return rows
members = [member(m) for m in range(10)]
B = 500
cpu = time.process_time(); wall = time.time()
pos = [0]*10; done = 0; tx = 0
while done < 10*len(members[0]):
    c.execute("BEGIN IMMEDIATE")
    names = []
    for _ in range(4):
        m = tx % 10; tx += 1
        batch = members[m][pos[m]:pos[m]+B]; pos[m] += B
        for (ns, pn, d, k, labels) in batch:
            uid, rv, rvn, owner, cr = f"{m:08x}-0003-4000-8000-{d*10+k:012x}", str(1000+d*10+k), 1000+d*10+k, f"{m:08x}-0002-4000-8000-{d:012x}", d*13000+k
            obj = json.dumps({"apiVersion":"v1","kind":"Pod","metadata":{"name":pn,"namespace":ns,"labels":labels,"uid":uid},"spec":{"x":"y"*(900 if variant != "smallobj" else 10)}})
            if variant == "ids":
                cur = c.execute("INSERT INTO resources (tid,cid,namespace,name,uid,resource_version,rv_num,owner_uid,created_at,labels,object) VALUES (1,?,?,?,?,?,?,?,?,?,?) RETURNING id", (m, ns, pn, uid, rv, rvn, owner, cr, json.dumps(labels), obj))
            elif variant == "tid":
                cur = c.execute("INSERT INTO resources (tid,cluster,namespace,name,uid,resource_version,rv_num,owner_uid,created_at,object) VALUES (1,?,?,?,?,?,?,?,?,?) RETURNING id", (f"member-{m:02d}", ns, pn, uid, rv, rvn, owner, cr, obj))
            elif variant == "col":
                cur = c.execute("INSERT INTO resources (grp,version,resource,cluster,namespace,name,uid,resource_version,rv_num,owner_uid,created_at,labels,object) VALUES ('','v1','pods',?,?,?,?,?,?,?,?,?,?) RETURNING id", (f"member-{m:02d}", ns, pn, uid, rv, rvn, owner, cr, json.dumps(labels), obj))
            else:
                cur = c.execute("INSERT INTO resources (grp,version,resource,cluster,namespace,name,uid,resource_version,rv_num,owner_uid,created_at,object) VALUES ('','v1','pods',?,?,?,?,?,?,?,?,?) RETURNING id", (f"member-{m:02d}", ns, pn, uid, rv, rvn, owner, cr, obj))
            rid = cur.fetchone()[0]
            if variant in ("col", "ids"):
                c.executemany("INSERT INTO labels (key,value,rid) VALUES (?,?,?)", [(k, v, rid) for k, v in labels.items()])
            else:
                c.executemany("INSERT INTO labels (rid,key,value) VALUES (?,?,?)", [(rid, k, v) for k, v in labels.items()])
            names.append((rid, pn))
            done += 1
    if variant != "nofts":
        for n in names: c.execute("INSERT INTO resources_names (rowid, name) VALUES (?, ?)", n)
    c.execute("COMMIT")
print(variant, N, "cpu us/obj %.1f" % ((time.process_time()-cpu)/done*1e6), "wall us/obj %.1f" % ((time.time()-wall)/done*1e6), "size MiB %d" % (os.path.getsize(path)//2**20))
for s in ("", "-wal", "-shm"):
    try: os.remove(path + s)
    except FileNotFoundError: pass
