/*
 * The confluent sink's per-record loop, in C: one librdkafka producer fed whole Arrow
 * batches, so no Python call (and no Python object) is made per record.
 *
 * Python (kappa_ingest.native) compiles this against the librdkafka that ships inside
 * the confluent-kafka wheel and calls it through ctypes, one call per batch of up to
 * 10,000 records. The loop builds each record from Arrow buffers: value and key (binary
 * arrays: int32 offsets + data), timestamp (int64), and the contract's two headers,
 * run_id (one per run) and source_file (one per distinct file, chosen by index).
 *
 * Delivery is counted here: librdkafka calls dr_msg_cb for every record, acknowledged or
 * failed, from the polls in kp_produce and kp_flush on the caller's thread; after a
 * flush that leaves nothing in flight, acknowledged = produced - failed. Only the few declarations used are
 * written out (stable public ABI of rdkafka.h, librdkafka >= 1.0), as the wheel carries
 * no header.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_message_s {
    int err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;

enum { VT_END, VT_TOPIC, VT_RKT, VT_PARTITION, VT_VALUE, VT_KEY, VT_OPAQUE, VT_MSGFLAGS, VT_TIMESTAMP, VT_HEADER };
#define MSG_F_COPY 0x2
#define ERR_QUEUE_FULL (-184)
#define ERR_FATAL (-150)
#define ERR_AUTHENTICATION (-169)
#define ERR_TOPIC_AUTHORIZATION_FAILED 29
#define ERR_CLUSTER_AUTHORIZATION_FAILED 31
#define CONF_OK 0
#define PRODUCER 0

rd_kafka_conf_t *rd_kafka_conf_new(void);
int rd_kafka_conf_set(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
void rd_kafka_conf_destroy(rd_kafka_conf_t *);
void rd_kafka_conf_set_opaque(rd_kafka_conf_t *, void *);
void rd_kafka_conf_set_dr_msg_cb(rd_kafka_conf_t *, void (*)(rd_kafka_t *, const rd_kafka_message_t *, void *));
void rd_kafka_conf_set_error_cb(rd_kafka_conf_t *, void (*)(rd_kafka_t *, int, const char *, void *));
rd_kafka_t *rd_kafka_new(int, rd_kafka_conf_t *, char *, size_t);
int rd_kafka_producev(rd_kafka_t *, ...);
int rd_kafka_poll(rd_kafka_t *, int);
int rd_kafka_flush(rd_kafka_t *, int);
int rd_kafka_outq_len(rd_kafka_t *);
int rd_kafka_fatal_error(rd_kafka_t *, char *, size_t);
const char *rd_kafka_err2str(int);
void rd_kafka_destroy(rd_kafka_t *);

typedef struct {
    rd_kafka_t *rk;
    int64_t failed;
    int first_error;      /* 0: none */
    int fatal_error;      /* 0: none */
    char fatal_reason[512];
} kp_producer;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    kp_producer *p = opaque;
    (void)rk;
    if (msg->err) {
        p->failed++;
        if (!p->first_error) p->first_error = msg->err;
    }
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    kp_producer *p = opaque;
    if (p->fatal_error) return;
    if (err == ERR_FATAL) {
        p->fatal_error = rd_kafka_fatal_error(rk, p->fatal_reason, sizeof p->fatal_reason);
    } else if (err == ERR_AUTHENTICATION || err == ERR_TOPIC_AUTHORIZATION_FAILED ||
               err == ERR_CLUSTER_AUTHORIZATION_FAILED) {
        p->fatal_error = err;
        snprintf(p->fatal_reason, sizeof p->fatal_reason, "%s", reason);
    }
}

/* A producer from n librdkafka properties; NULL with errstr set if one is refused. */
kp_producer *kp_new(const char **names, const char **values, int n, char *errstr, size_t errlen) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (int i = 0; i < n; i++) {
        if (rd_kafka_conf_set(conf, names[i], values[i], errstr, errlen) != CONF_OK) {
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    kp_producer *p = calloc(1, sizeof *p);
    rd_kafka_conf_set_opaque(conf, p);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_error_cb(conf, on_error);
    p->rk = rd_kafka_new(PRODUCER, conf, errstr, errlen); /* takes conf on success */
    if (!p->rk) {
        rd_kafka_conf_destroy(conf);
        free(p);
        return NULL;
    }
    return p;
}

/*
 * Produce records [0, n). value_offsets/key_offsets are Arrow int32 offsets already
 * advanced to the array's offset; key_offsets NULL means no key, key_valid (an Arrow
 * validity bitmap, bit key_bit0 + i) NULL means no null key. file_index[i] picks the
 * source_file header. Returns n, or -(i + 1) when record i is refused before sending
 * (its error code in *err), or -(n + 1) when a fatal error stops the producer.
 */
int64_t kp_produce(kp_producer *p, const char *topic, int64_t n,
                   const int32_t *value_offsets, const uint8_t *value_data,
                   const int32_t *key_offsets, const uint8_t *key_data,
                   const uint8_t *key_valid, int64_t key_bit0,
                   const int64_t *timestamps,
                   const char *run_id, int64_t run_id_len,
                   const int32_t *file_index, const char **files, const int64_t *file_lens,
                   int *err) {
    for (int64_t i = 0; i < n; i++) {
        const void *key = NULL;
        size_t key_len = 0;
        if (key_offsets && (!key_valid || (key_valid[(key_bit0 + i) >> 3] >> ((key_bit0 + i) & 7) & 1))) {
            key = key_data + key_offsets[i];
            key_len = (size_t)(key_offsets[i + 1] - key_offsets[i]);
        }
        int f = file_index[i];
        for (;;) {
            int e = rd_kafka_producev(
                p->rk, VT_TOPIC, topic, VT_MSGFLAGS, MSG_F_COPY,
                VT_VALUE, (void *)(value_data + value_offsets[i]), (size_t)(value_offsets[i + 1] - value_offsets[i]),
                VT_KEY, (void *)key, key_len, VT_TIMESTAMP, timestamps[i],
                VT_HEADER, "run_id", (const void *)run_id, (ssize_t)run_id_len,
                VT_HEADER, "source_file", (const void *)files[f], (ssize_t)file_lens[f], VT_END);
            if (e == 0) break;
            if (e != ERR_QUEUE_FULL) {
                *err = e;
                return -(i + 1);
            }
            /* The local queue is full: serve delivery reports until it drains. */
            rd_kafka_poll(p->rk, 50);
            if (p->fatal_error) {
                *err = p->fatal_error;
                return -(n + 1);
            }
        }
    }
    rd_kafka_poll(p->rk, 0);
    return n;
}

/* Wait for every record's delivery report; returns how many are still in flight. */
int kp_flush(kp_producer *p, int timeout_ms) {
    rd_kafka_flush(p->rk, timeout_ms);
    return rd_kafka_outq_len(p->rk);
}

int64_t kp_failed(kp_producer *p) { return p->failed; }
int kp_first_error(kp_producer *p) { return p->first_error; }
int kp_fatal_error(kp_producer *p) { return p->fatal_error; }
const char *kp_fatal_reason(kp_producer *p) { return p->fatal_reason; }
const char *kp_err2str(int err) { return rd_kafka_err2str(err); }

void kp_destroy(kp_producer *p) {
    rd_kafka_destroy(p->rk);
    free(p);
}
