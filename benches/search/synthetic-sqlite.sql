-- 1.2M objects shaped as bench-search's (10 members x 10,000 Deployments, ReplicaSets and
-- 100,000 Pods; app, team, tier, version, pod-template-hash labels) written straight into
-- a search store at schema version 1, for store-level query figures without kubesim
-- (benches/results/search.md). Usage in the results file.
CREATE TEMP TABLE words(i INTEGER PRIMARY KEY, w TEXT);
INSERT INTO words VALUES (0,'payments'),(1,'checkout'),(2,'catalog'),(3,'search'),(4,'orders'),(5,'billing'),(6,'auth'),(7,'profile'),(8,'inventory'),(9,'shipping'),(10,'ledger'),(11,'notify'),(12,'ratings'),(13,'pricing'),(14,'media'),(15,'gateway');
CREATE TEMP TABLE roles(i INTEGER PRIMARY KEY, r TEXT);
INSERT INTO roles VALUES (0,'api'),(1,'worker'),(2,'web'),(3,'sync');
CREATE TEMP TABLE tiers(i INTEGER PRIMARY KEY, t TEXT);
INSERT INTO tiers VALUES (0,'frontend'),(1,'backend'),(2,'cache'),(3,'db'),(4,'worker');
CREATE TEMP TABLE deps AS
WITH RECURSIVE m(m) AS (SELECT 0 UNION ALL SELECT m+1 FROM m WHERE m<9),
 d(d) AS (SELECT 0 UNION ALL SELECT d+1 FROM d WHERE d<9999)
SELECT m, d, (SELECT w FROM words WHERE i=d%16)||'-'||(SELECT r FROM roles WHERE i=(d/16)%4)||'-'||d AS name,
 printf('ns-%02d', d%50) AS ns, (SELECT t FROM tiers WHERE i=(d/50)%5) AS tier, 'team-'||((d/7)%12) AS team,
 'v'||(1+(d/3)%4) AS ver, lower(hex(randomblob(5))) AS hash FROM m, d;
INSERT INTO resources (grp,version,resource,cluster,namespace,name,uid,resource_version,rv_num,owner_uid,created_at,object)
SELECT 'apps','v1','deployments','member-'||m, ns, name, printf('%08x-0001-%d',m,d), d*3+1, d*3+1, NULL, d*13000,
 json_object('apiVersion','apps/v1','kind','Deployment','metadata',json_object('name',name,'namespace',ns,'labels',json_object('app',name,'team',team,'tier',tier,'version',ver)),'spec',json_object('replicas',10,'template',json_object('x',hex(randomblob(150))))) FROM deps;
INSERT INTO resources (grp,version,resource,cluster,namespace,name,uid,resource_version,rv_num,owner_uid,created_at,object)
SELECT 'apps','v1','replicasets','member-'||m, ns, name||'-'||hash, printf('%08x-0002-%d',m,d), d*3+2, d*3+2, printf('%08x-0001-%d',m,d), d*13000,
 json_object('apiVersion','apps/v1','kind','ReplicaSet','metadata',json_object('name',name,'namespace',ns,'labels',json_object('app',name,'team',team,'tier',tier,'version',ver)),'spec',json_object('replicas',10,'template',json_object('x',hex(randomblob(150))))) FROM deps;
INSERT INTO resources (grp,version,resource,cluster,namespace,name,uid,resource_version,rv_num,owner_uid,created_at,object)
WITH RECURSIVE k(k) AS (SELECT 0 UNION ALL SELECT k+1 FROM k WHERE k<9)
SELECT '','v1','pods','member-'||m, ns, name||'-'||hash||'-'||lower(hex(randomblob(3))), printf('%08x-0003-%d-%d',m,d,k), 1000000+d*10+k, 1000000+d*10+k, printf('%08x-0002-%d',m,d), d*13000+k,
 json_object('apiVersion','v1','kind','Pod','metadata',json_object('name',name,'namespace',ns,'labels',json_object('app',name,'team',team,'tier',tier,'version',ver,'pod-template-hash',hash)),'spec',json_object('x',hex(randomblob(300)))) FROM deps, k;
INSERT INTO labels (rid,key,value) SELECT r.id, j.key, j.value FROM resources r, json_each(r.object,'$.metadata.labels') j;
ANALYZE;
