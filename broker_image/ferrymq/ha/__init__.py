"""Master/slave replication (seed 001): the HA listener and connections on the master, the HA
client on the slave, the SYNC_MASTER replica wait, and the slave's metadata synchronisation."""
