-- 1.2M objects shaped as bench-search's (10 members x 10,000 Deployments, ReplicaSets and
-- 100,000 Pods; app, team, tier, version, pod-template-hash labels) written straight into
-- a search store at schema version 1, for store-level query figures without kubesim
-- (benches/results/search.md). Usage in the results file.
\timing on
CREATE TEMP TABLE deps AS
SELECT m, d, (ARRAY['payments','checkout','catalog','search','orders','billing','auth','profile','inventory','shipping','ledger','notify','ratings','pricing','media','gateway'])[d%16+1]||'-'||(ARRAY['api','worker','web','sync'])[(d/16)%4+1]||'-'||d AS name,
 'ns-'||lpad((d%50)::text,2,'0') AS ns, (ARRAY['frontend','backend','cache','db','worker'])[(d/50)%5+1] AS tier, 'team-'||((d/7)%12) AS team,
 'v'||(1+(d/3)%4) AS ver, substr(md5(random()::text),1,10) AS hash FROM generate_series(0,9) m, generate_series(0,9999) d;
INSERT INTO resources (grp,version,resource,cluster,namespace,name,uid,resource_version,rv_num,owner_uid,created_at,object)
SELECT 'apps','v1','deployments','member-'||m, ns, name, m||'-0001-'||d, d*3+1, d*3+1, NULL, d*13000,
 jsonb_build_object('apiVersion','apps/v1','kind','Deployment','metadata',jsonb_build_object('name',name,'namespace',ns,'labels',jsonb_build_object('app',name,'team',team,'tier',tier,'version',ver)),'spec',jsonb_build_object('x',repeat(md5(d::text),9))) FROM deps;
INSERT INTO resources (grp,version,resource,cluster,namespace,name,uid,resource_version,rv_num,owner_uid,created_at,object)
SELECT 'apps','v1','replicasets','member-'||m, ns, name||'-'||hash, m||'-0002-'||d, d*3+2, d*3+2, m||'-0001-'||d, d*13000,
 jsonb_build_object('apiVersion','apps/v1','kind','ReplicaSet','metadata',jsonb_build_object('name',name,'namespace',ns,'labels',jsonb_build_object('app',name,'team',team,'tier',tier,'version',ver)),'spec',jsonb_build_object('x',repeat(md5(d::text),9))) FROM deps;
INSERT INTO resources (grp,version,resource,cluster,namespace,name,uid,resource_version,rv_num,owner_uid,created_at,object)
SELECT '','v1','pods','member-'||m, ns, name||'-'||hash||'-'||k, m||'-0003-'||d||'-'||k, 1000000+d*10+k, 1000000+d*10+k, m||'-0002-'||d, d*13000+k,
 jsonb_build_object('apiVersion','v1','kind','Pod','metadata',jsonb_build_object('name',name,'namespace',ns,'labels',jsonb_build_object('app',name,'team',team,'tier',tier,'version',ver,'pod-template-hash',hash)),'spec',jsonb_build_object('x',repeat(md5(d::text),18))) FROM deps, generate_series(0,9) k;
INSERT INTO labels (rid,key,value) SELECT r.id, j.key, j.value FROM resources r, jsonb_each_text(r.object->'metadata'->'labels') j;
ANALYZE resources; ANALYZE labels;
