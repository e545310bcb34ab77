"""Kafka as kappa-ingest meets it, below everything that sends.

- ``settings``     Kafka's Java setting names, checked and translated for each client
- ``credentials``  ``${NAME}`` / ``@PATH`` secrets, resolved and masked in all output
- ``security``     SASL_SSL for the embedded broker: certificates, SCRAM users, ACLs
- ``broker``       the embedded KRaft broker (``kappa-ingest kafka start|stop|status``)
- ``endpoint``     the run's Kafka: the servers given, or the embedded broker started
- ``topics``       driver-side admin: topics, offsets, configs, ACL checks
- ``interceptor``  the Java producer interceptor Spark's own Kafka sink needs (``java/``)
"""
