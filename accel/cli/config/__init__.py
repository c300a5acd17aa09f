"""`accel config` and the config file: the questionary wizard, reading and writing config.yaml
(accel's keys, or an Accelerate config mapped onto them), and the checks `accel test` runs on one."""
