-- A feinsum timing database at schema version 0001 (the first released schema), with
-- data: 2 devices, 2 einsums, 2 recipes, 3 configurations, 5 measurements, revision 5.
-- tests/test_database_migrations.py loads it and opens it with the current code.
BEGIN TRANSACTION;
CREATE TABLE configurations (
	id INTEGER NOT NULL, 
	params_hash VARCHAR(64) NOT NULL, 
	params_json TEXT NOT NULL, 
	CONSTRAINT pk_configurations PRIMARY KEY (id), 
	CONSTRAINT uq_configurations_params_hash UNIQUE (params_hash)
);
INSERT INTO "configurations" VALUES(1,'e9ef03e8ae2e66a79983d0f62a96070aa187eb84786955fe8b9c14a6f0314810','{"tile":8}');
INSERT INTO "configurations" VALUES(2,'96facfffbfd8381689a215454dd0ddaba26c6f7b99ef22e9317588afd48ef3c9','{"tile":16}');
INSERT INTO "configurations" VALUES(3,'ef4f093036adcd97f45677f7877db4007a9c57977b56ae65e1332a1e3b02762d','{"vec":4,"wg":64}');
CREATE TABLE devices (
	id INTEGER NOT NULL, 
	"key" VARCHAR(1000) NOT NULL, 
	platform_name VARCHAR(255) NOT NULL, 
	platform_version VARCHAR(255) NOT NULL, 
	vendor VARCHAR(255) NOT NULL, 
	name VARCHAR(255) NOT NULL, 
	driver_version VARCHAR(255) NOT NULL, 
	opencl_version VARCHAR(255) NOT NULL, 
	device_type VARCHAR(32) NOT NULL, 
	compute_units INTEGER NOT NULL, 
	max_work_group_size INTEGER NOT NULL, 
	local_mem_size BIGINT NOT NULL, 
	global_mem_size BIGINT NOT NULL, 
	has_fp64 BOOLEAN NOT NULL, 
	info_json TEXT NOT NULL, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_devices PRIMARY KEY (id), 
	CONSTRAINT uq_devices_key UNIQUE ("key")
);
INSERT INTO "devices" VALUES(1,'GenuineIntel | pthread-Intel(R) Xeon(R) CPU | OpenCL 3.0 PoCL HSTR | 3.1 | OpenCL 3.0 PoCL 3.1','Portable Computing Language','OpenCL 3.0 PoCL 3.1','GenuineIntel','pthread-Intel(R) Xeon(R) CPU','3.1','OpenCL 3.0 PoCL HSTR','CPU',2,4096,1048576,17179869184,1,'{"compute_units":2,"device_type":"CPU","driver_version":"3.1","global_mem_size":17179869184,"has_fp64":true,"local_mem_size":1048576,"max_constant_buffer_size":1048576,"max_work_group_size":4096,"max_work_item_sizes":[4096,4096,4096],"name":"pthread-Intel(R) Xeon(R) CPU","native_vector_width_double":8,"native_vector_width_float":16,"opencl_version":"OpenCL 3.0 PoCL HSTR","platform_name":"Portable Computing Language","platform_version":"OpenCL 3.0 PoCL 3.1","preferred_vector_width_double":8,"preferred_vector_width_float":16,"vendor":"GenuineIntel"}','2026-01-01 00:00:00.000000');
INSERT INTO "devices" VALUES(2,'NVIDIA Corporation | NVIDIA H100 | OpenCL 3.0 CUDA | 550.54 | OpenCL 3.0 CUDA 12.4','NVIDIA CUDA','OpenCL 3.0 CUDA 12.4','NVIDIA Corporation','NVIDIA H100','550.54','OpenCL 3.0 CUDA','GPU',132,4096,1048576,17179869184,1,'{"compute_units":132,"device_type":"GPU","driver_version":"550.54","global_mem_size":17179869184,"has_fp64":true,"local_mem_size":1048576,"max_constant_buffer_size":1048576,"max_work_group_size":4096,"max_work_item_sizes":[4096,4096,4096],"name":"NVIDIA H100","native_vector_width_double":8,"native_vector_width_float":16,"opencl_version":"OpenCL 3.0 CUDA","platform_name":"NVIDIA CUDA","platform_version":"OpenCL 3.0 CUDA 12.4","preferred_vector_width_double":8,"preferred_vector_width_float":16,"vendor":"NVIDIA Corporation"}','2026-01-01 00:00:00.000000');
CREATE TABLE einsums (
	id INTEGER NOT NULL, 
	canonical_key VARCHAR(64) NOT NULL, 
	structure_key VARCHAR(64) NOT NULL, 
	canonical_text TEXT NOT NULL, 
	spec_json TEXT NOT NULL, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_einsums PRIMARY KEY (id), 
	CONSTRAINT uq_einsums_canonical_key UNIQUE (canonical_key)
);
INSERT INTO "einsums" VALUES(1,'fek1-old-a','fek1-struct-s','sum -> [i0] | old a','{"format":"feinsum.BatchedEinsum"}','2026-01-01 00:00:00.000000');
INSERT INTO "einsums" VALUES(2,'fek1-old-b','fek1-struct-t','sum -> [i0] | old b','{"format":"feinsum.BatchedEinsum"}','2026-01-01 00:00:00.000000');
CREATE TABLE feinsum_alembic_version (
	version_num VARCHAR(32) NOT NULL, 
	CONSTRAINT feinsum_alembic_version_pkc PRIMARY KEY (version_num)
);
INSERT INTO "feinsum_alembic_version" VALUES('0001');
CREATE TABLE feinsum_state (
	id INTEGER NOT NULL, 
	application VARCHAR(32) NOT NULL, 
	revision BIGINT NOT NULL, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_feinsum_state PRIMARY KEY (id)
);
INSERT INTO "feinsum_state" VALUES(1,'feinsum',5,'2026-01-01 00:00:00.000000');
CREATE TABLE measurements (
	id INTEGER NOT NULL, 
	uid VARCHAR(32) NOT NULL, 
	einsum_id INTEGER NOT NULL, 
	device_id INTEGER NOT NULL, 
	recipe_id INTEGER NOT NULL, 
	configuration_id INTEGER NOT NULL, 
	lengths_key VARCHAR(1000) NOT NULL, 
	status VARCHAR(32) NOT NULL, 
	sample_count INTEGER NOT NULL, 
	samples_json TEXT NOT NULL, 
	min_time FLOAT, 
	median_time FLOAT, 
	spread FLOAT, 
	flops FLOAT, 
	bytes FLOAT, 
	gflops FLOAT, 
	validation_error FLOAT, 
	message TEXT, 
	host VARCHAR(255), 
	loopy_version VARCHAR(64), 
	pyopencl_version VARCHAR(64), 
	feinsum_version VARCHAR(64), 
	started_at DATETIME, 
	measured_at DATETIME NOT NULL, 
	CONSTRAINT pk_measurements PRIMARY KEY (id), 
	CONSTRAINT fk_measurements_einsum_id_einsums FOREIGN KEY(einsum_id) REFERENCES einsums (id) ON DELETE RESTRICT, 
	CONSTRAINT fk_measurements_device_id_devices FOREIGN KEY(device_id) REFERENCES devices (id) ON DELETE RESTRICT, 
	CONSTRAINT fk_measurements_recipe_id_recipes FOREIGN KEY(recipe_id) REFERENCES recipes (id) ON DELETE RESTRICT, 
	CONSTRAINT fk_measurements_configuration_id_configurations FOREIGN KEY(configuration_id) REFERENCES configurations (id) ON DELETE RESTRICT, 
	CONSTRAINT uq_measurements_uid UNIQUE (uid)
);
INSERT INTO "measurements" VALUES(1,'00000000000000000000000000000001',1,1,1,1,'{"n0":50000}','ok',3,'[0.002,0.001,0.003]',0.001,0.002,1.0,2000000000.0,100000000.0,1000.0,1.0e-13,NULL,'host1','2025.2','2026.1.4','0.1.0','2026-02-01 10:00:00.000000','2026-02-01 10:00:01.000000');
INSERT INTO "measurements" VALUES(2,'00000000000000000000000000000002',1,1,1,2,'{"n0":50000}','ok',2,'[0.004,0.005]',0.004,0.0045,2.22222222222222209886e-01,2000000000.0,100000000.0,4.44444444444444457069e+02,1.0e-13,NULL,'host1','2025.2','2026.1.4','0.1.0',NULL,'2026-02-01 10:00:02.000000');
INSERT INTO "measurements" VALUES(3,'00000000000000000000000000000003',1,1,2,3,'{"n0":50000}','compile-error',0,'[]',NULL,NULL,NULL,NULL,NULL,NULL,NULL,'error: no vec','host1','2025.2','2026.1.4','0.1.0',NULL,'2026-02-01 10:00:03.000000');
INSERT INTO "measurements" VALUES(4,'00000000000000000000000000000004',2,2,2,3,'{"n0":1000,"n1":300}','ok',1,'[1e-05]',1.0e-05,1.0e-05,0.0,100000000.0,1000000.0,10000.0,NULL,NULL,'gpu-box','2025.2','2026.1.4','0.1.0',NULL,'2026-02-02 09:00:00.000000');
INSERT INTO "measurements" VALUES(5,'00000000000000000000000000000005',2,2,2,1,'{"n0":1000,"n1":300}','wrong-result',1,'[2e-05]',2.0e-05,2.0e-05,0.0,100000000.0,1000000.0,5000.0,0.5,'max error 0.5','gpu-box','2025.2','2026.1.4','0.1.0',NULL,'2026-02-02 09:00:01.000000');
CREATE TABLE recipes (
	id INTEGER NOT NULL, 
	name VARCHAR(255) NOT NULL, 
	version VARCHAR(255) NOT NULL, 
	created_at DATETIME NOT NULL, 
	CONSTRAINT pk_recipes PRIMARY KEY (id), 
	CONSTRAINT uq_recipes_name_version UNIQUE (name, version)
);
INSERT INTO "recipes" VALUES(1,'generic','v1','2026-01-01 00:00:00.000000');
INSERT INTO "recipes" VALUES(2,'dg','abc123','2026-01-01 00:00:00.000000');
CREATE INDEX ix_devices_vendor_type ON devices (vendor, device_type);
CREATE INDEX ix_einsums_structure_key ON einsums (structure_key);
CREATE INDEX ix_measurements_lookup ON measurements (einsum_id, device_id, status, lengths_key, median_time);
CREATE INDEX ix_measurements_device_id ON measurements (device_id);
COMMIT;
