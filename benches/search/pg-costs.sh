#!/usr/bin/env bash
# What each part of the PostgreSQL search schema costs the server per object written:
# 200,000 Pods shaped as bench-search's (five labels, an owner, ~830-byte JSON) written
# in 500-object batches, as the store does (INSERT ... ON CONFLICT ... RETURNING, then the
# labels), by one backend in one DO block, once per schema variant (each variant drops
# one part). The difference to `full` is that part's cost. No client or protocol work is
# counted, so the absolute figures are below the bench's. Usage:
#   bash benches/search/pg-costs.sh "$(scripts/postgres start | tail -1)"
# Creates and drops the database `pgcosts` on that server.
set -euo pipefail
url="${1:?usage: pg-costs.sh postgres://user@host:port/db}"
db="${url%/*}/pgcosts"
psql -q "$url" -c "DROP DATABASE IF EXISTS pgcosts" -c "CREATE DATABASE pgcosts"
psql -q "$db" >/dev/null <<'SQL'
CREATE EXTENSION pg_trgm;
CREATE TABLE src AS
WITH deps AS (
  SELECT m, d,
    (ARRAY['payments','checkout','catalog','search','orders','billing','auth','profile','inventory','shipping','ledger','notify','ratings','pricing','media','gateway'])[d%16+1]
      ||'-'||(ARRAY['api','worker','web','sync'])[(d/16)%4+1]||'-'||d AS name,
    'ns-'||lpad((d%50)::text,2,'0') AS ns, (ARRAY['frontend','backend','cache','db','worker'])[(d/50)%5+1] AS tier,
    'team-'||((d/7)%12) AS team, 'v'||(1+(d/3)%4) AS ver, substr(md5(m||'-'||d),1,10) AS hash
  FROM generate_series(0,1) m, generate_series(0,9999) d)
SELECT row_number() OVER () AS i, ''::text g, 'v1'::text v, 'pods'::text r, 'member-'||m c, ns,
  name||'-'||hash||'-'||substr(md5(k::text||d),1,5) n, md5(m||'/'||d||'/'||k)::uuid::text u,
  (1000000+d*10+k)::text rv, (1000000+d*10+k)::bigint rvn, m||'-0002-'||d o, (d*13000+k)::bigint ca,
  jsonb_build_object('apiVersion','v1','kind','Pod','metadata',jsonb_build_object('name',name,'namespace',ns,
    'uid',md5(m||'/'||d||'/'||k)::uuid,'labels',jsonb_build_object('app',name,'team',team,'tier',tier,'version',ver,'pod-template-hash',hash),
    'ownerReferences',jsonb_build_array(jsonb_build_object('apiVersion','apps/v1','kind','ReplicaSet','name',name||'-'||hash,'uid',md5(m||'-'||d)::uuid,'controller',true))),
    'spec',jsonb_build_object('containers',jsonb_build_array(jsonb_build_object('name','main','image','registry.example.com/'||name||':1.2.3',
      'ports',jsonb_build_array(jsonb_build_object('containerPort',8080)),'resources',jsonb_build_object('requests',jsonb_build_object('cpu','100m','memory','128Mi')))),
      'nodeName','node-'||(d%40)),
    'status',jsonb_build_object('phase','Running','podIP','10.0.'||(d%250)||'.'||k,
      'conditions',jsonb_build_array(jsonb_build_object('type','Ready','status','True','lastTransitionTime','2024-01-01T00:00:00Z'))))::text obj,
  ARRAY['app','team','tier','version','pod-template-hash'] lk, ARRAY[name,team,tier,ver,hash] lv
FROM deps, generate_series(0,9) k;
CREATE INDEX ON src (i); CREATE INDEX ON src (c, n); ANALYZE src;
SQL

table() { # $1: UNLOGGED or empty, $2: the object column's type
  echo "CREATE $1 TABLE resources (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    grp TEXT COLLATE \"C\" NOT NULL, version TEXT COLLATE \"C\" NOT NULL, resource TEXT COLLATE \"C\" NOT NULL,
    cluster TEXT COLLATE \"C\" NOT NULL, namespace TEXT COLLATE \"C\" NOT NULL, name TEXT COLLATE \"C\" NOT NULL,
    uid TEXT NOT NULL, resource_version TEXT NOT NULL, rv_num BIGINT NOT NULL, owner_uid TEXT COLLATE \"C\",
    created_at BIGINT NOT NULL, object $2 NOT NULL,
    UNIQUE (grp, version, resource, cluster, namespace, name)) WITH (autovacuum_enabled = off);
  CREATE $1 TABLE labels (rid BIGINT NOT NULL, key TEXT COLLATE \"C\" NOT NULL, value TEXT COLLATE \"C\" NOT NULL,
    PRIMARY KEY (rid, key) INCLUDE (value)) WITH (autovacuum_enabled = off);"
}
ORDER='CREATE INDEX resources_owner ON resources (cluster, owner_uid);
  CREATE INDEX resources_created ON resources (grp, version, resource, created_at, cluster, namespace, name);
  CREATE INDEX resources_rv ON resources (grp, version, resource, rv_num, cluster, namespace, name);
  CREATE INDEX resources_ns ON resources (grp, version, resource, namespace, cluster, name);'
TRGM='CREATE INDEX resources_name_trgm ON resources USING gin (name gin_trgm_ops);'
KV='CREATE INDEX labels_kv ON labels (key, value);'

run() { # $1 name, $2 schema, $3 object type, $4 1 to write labels
  psql -q "$db" -c "DROP TABLE IF EXISTS resources, labels" -c "$2" >/dev/null
  local then="SELECT count(*) INTO got FROM ins;"
  [ "$4" = 1 ] && then="INSERT INTO labels (rid, key, value) SELECT ins.id, l.k, l.v FROM ins
      JOIN src s ON s.c = ins.cluster AND s.n = ins.name AND s.i > b*500 AND s.i <= b*500+500, unnest(s.lk, s.lv) AS l(k, v);"
  local ms
  ms=$(psql -q -v ON_ERROR_STOP=1 "$db" <<SQL | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -1
\timing on
DO \$\$ DECLARE b int; got int; BEGIN
FOR b IN 0..399 LOOP
  WITH ins AS (INSERT INTO resources (grp, version, resource, cluster, namespace, name, uid,
      resource_version, rv_num, owner_uid, created_at, object)
    SELECT g, v, r, c, ns, n, u, rv, rvn, o, ca, obj::$3 FROM src WHERE i > b*500 AND i <= b*500+500
    ON CONFLICT (grp, version, resource, cluster, namespace, name) DO UPDATE SET object = excluded.object
    RETURNING id, cluster, name)
  $then
END LOOP; END \$\$;
SQL
)
  local us
  us=$(echo "$ms/200" | bc -l)
  [ -z "$full" ] && full=$us
  printf '| %-34s | %6.1f s | %5.1f us | %+5.1f us |\n' "$1" "$(echo "$ms/1000" | bc -l)" "$us" "$(echo "$us-$full" | bc -l)"
}

full=
echo "| variant | 200k objects | per object | against full |"
echo "|---|---|---|---|"
run "full (the store's schema)" "$(table '' jsonb) $ORDER $TRGM $KV" jsonb 1
run "no trigram index of names" "$(table '' jsonb) $ORDER $KV" jsonb 1
run "no labels_kv (key, value) index" "$(table '' jsonb) $ORDER $TRGM" jsonb 1
run "no labels at all" "$(table '' jsonb) $ORDER $TRGM $KV" jsonb 0
run "no owner/created/rv/ns indexes" "$(table '' jsonb) $TRGM $KV" jsonb 1
run "object as json (validated text)" "$(table '' json) $ORDER $TRGM $KV" json 1
run "object as text (not parsed)" "$(table '' text) $ORDER $TRGM $KV" text 1
run "unlogged tables (no WAL)" "$(table UNLOGGED jsonb) $ORDER $TRGM $KV" jsonb 1
run "table, keys and labels only" "$(table '' jsonb)" jsonb 1
run "full (again: the noise)" "$(table '' jsonb) $ORDER $TRGM $KV" jsonb 1
psql -q "$url" -c "DROP DATABASE pgcosts"
