/*
 * The few declarations of librdkafka's public ABI (rdkafka.h, stable since 1.4) that the
 * producer and consumer loops and the keys' partitions use: the wheel of confluent-kafka carries the library, not
 * its header.
 */
#ifndef KAPPA_RDKAFKA_ABI_H
#define KAPPA_RDKAFKA_ABI_H
#include <stddef.h>
#include <stdint.h>

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_error_s rd_kafka_error_t;
typedef struct rd_kafka_headers_s rd_kafka_headers_t;
typedef struct rd_kafka_message_s {
    int err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private; /* the record's opaque (VT_OPAQUE) in delivery reports */
} rd_kafka_message_t;

rd_kafka_conf_t *rd_kafka_conf_new(void);
int rd_kafka_conf_set(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
void rd_kafka_conf_destroy(rd_kafka_conf_t *);
rd_kafka_t *rd_kafka_new(int, rd_kafka_conf_t *, char *, size_t);
void rd_kafka_destroy(rd_kafka_t *);
const char *rd_kafka_err2str(int);
int32_t rd_kafka_msg_partitioner_murmur2(const rd_kafka_topic_t *, const void *, size_t, int32_t, void *, void *);
#endif
