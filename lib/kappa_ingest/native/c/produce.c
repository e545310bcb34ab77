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
 * flush that leaves nothing in flight, acknowledged = produced - failed. The same
 * callback notes where the current transaction's records landed, as runs of consecutive
 * offsets per partition: each partition written gets one commit marker, which takes an
 * offset, and a reader of the topic can tell this transaction's records from any other's
 * (the run's reconciliation does both).
 *
 * Transactions (exactly-once delivery) are librdkafka's own; the kp_txn_* calls return
 * 0 or the error's code, with its text and kind kept in the producer for Python to read.
 *
 * librdkafka's declarations: rdkafka_abi.h.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "rdkafka_abi.h"

enum { VT_END, VT_TOPIC, VT_RKT, VT_PARTITION, VT_VALUE, VT_KEY, VT_OPAQUE, VT_MSGFLAGS, VT_TIMESTAMP, VT_HEADER,
       VT_HEADERS };
#define MSG_F_COPY 0x2
#define ERR_QUEUE_FULL (-184)
#define ERR_STATE (-172)
#define ERR_FATAL (-150)
#define ERR_PURGE_QUEUE (-152)
#define ERR_PURGE_INFLIGHT (-151)
#define ERR_INVALID_DIFFERENT_RECORD (-138)
#define ERR_AUTHENTICATION (-169)
#define ERR_TOPIC_AUTHORIZATION_FAILED 29
#define ERR_CLUSTER_AUTHORIZATION_FAILED 31
#define ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED 53
#define PURGE_QUEUE 0x1
#define PURGE_INFLIGHT 0x2
#define CONF_OK 0
#define PRODUCER 0

void rd_kafka_conf_set_opaque(rd_kafka_conf_t *, void *);
void rd_kafka_conf_set_dr_msg_cb(rd_kafka_conf_t *, void (*)(rd_kafka_t *, const rd_kafka_message_t *, void *));
void rd_kafka_conf_set_error_cb(rd_kafka_conf_t *, void (*)(rd_kafka_t *, int, const char *, void *));
int rd_kafka_producev(rd_kafka_t *, ...);
int rd_kafka_poll(rd_kafka_t *, int);
int rd_kafka_flush(rd_kafka_t *, int);
int rd_kafka_purge(rd_kafka_t *, int);
int rd_kafka_outq_len(rd_kafka_t *);
int rd_kafka_fatal_error(rd_kafka_t *, char *, size_t);
rd_kafka_error_t *rd_kafka_init_transactions(rd_kafka_t *, int);
rd_kafka_error_t *rd_kafka_begin_transaction(rd_kafka_t *);
rd_kafka_error_t *rd_kafka_commit_transaction(rd_kafka_t *, int);
rd_kafka_error_t *rd_kafka_abort_transaction(rd_kafka_t *, int);
int rd_kafka_error_code(const rd_kafka_error_t *);
const char *rd_kafka_error_string(const rd_kafka_error_t *);
int rd_kafka_error_is_fatal(const rd_kafka_error_t *);
int rd_kafka_error_is_retriable(const rd_kafka_error_t *);
int rd_kafka_error_txn_requires_abort(const rd_kafka_error_t *);
void rd_kafka_error_destroy(rd_kafka_error_t *);
struct rd_kafka_metadata;
int rd_kafka_metadata(rd_kafka_t *, int, rd_kafka_topic_t *, const struct rd_kafka_metadata **, int);
void rd_kafka_metadata_destroy(const struct rd_kafka_metadata *);
rd_kafka_headers_t *rd_kafka_headers_new(size_t);
int rd_kafka_header_add(rd_kafka_headers_t *, const char *, ssize_t, const void *, ssize_t);
void rd_kafka_headers_destroy(rd_kafka_headers_t *);
rd_kafka_topic_t *rd_kafka_topic_new(rd_kafka_t *, const char *, void *);
void rd_kafka_topic_destroy(rd_kafka_topic_t *);

/* One batch of records, as Arrow buffers; mirrored by kappa_ingest.native.Batch. */
typedef struct {
    const char *topic;
    int64_t n;
    const int32_t *value_offsets; /* advanced to the array's offset */
    const uint8_t *value_data;
    const int32_t *key_offsets;   /* NULL: no key */
    const uint8_t *key_data;
    const uint8_t *key_valid;     /* NULL: no null key; else bit key_bit0 + i */
    int64_t key_bit0;
    const int64_t *timestamps;
    const char *run_id;
    int64_t run_id_len;
    const int32_t *file_index;    /* picks the source_file header of record i */
    const char **files;
    const int64_t *file_lens;
} kp_batch;

typedef struct {
    int64_t partition, first, count;
} kp_run;

typedef struct {
    rd_kafka_t *rk;
    int64_t failed;
    int first_error;      /* 0: none */
    int fatal_error;      /* 0: none */
    char fatal_reason[512];
    /* Where the current transaction's data records landed (or since creation): runs of
     * consecutive offsets, and per partition the index of its latest run (-1: none). */
    kp_run *runs;
    int64_t runs_len, runs_cap;
    int32_t *last_run;
    int32_t last_cap;
    int32_t touched_count;
    int runs_lost; /* an offset unknown, or memory refused: the runs are incomplete */
    /* The last transactional call's error: code 0 = none. */
    int txn_code;
    int txn_fatal;
    int txn_retriable;
    int txn_abortable;
    char txn_reason[512];
    /* The data topic's handle, taken once: a record produced by the topic's name has
     * librdkafka look it up under the client's write lock (rd_kafka_topic_new0). */
    rd_kafka_topic_t *rkt;
    char *rkt_name;
} kp_producer;

static char DATA_RECORD; /* the opaque of data-topic records: its address tags them */

static void touch(kp_producer *p, int32_t partition, int64_t offset) {
    if (partition < 0) return;
    if (partition >= p->last_cap) {
        int32_t cap = p->last_cap ? p->last_cap : 64;
        while (cap <= partition) cap *= 2;
        int32_t *grown = realloc(p->last_run, sizeof *grown * (size_t)cap);
        if (!grown) { /* counted as unknown by Python: touched_count stays a lower bound */
            p->runs_lost = 1;
            return;
        }
        for (int32_t i = p->last_cap; i < cap; i++) grown[i] = -1;
        p->last_run = grown;
        p->last_cap = cap;
    }
    int32_t i = p->last_run[partition];
    if (i < 0) p->touched_count++;
    if (offset < 0) {
        p->runs_lost = 1;
        return;
    }
    if (i >= 0 && p->runs[i].first + p->runs[i].count == offset) {
        p->runs[i].count++;
        return;
    }
    if (p->runs_len == p->runs_cap) {
        int64_t cap = p->runs_cap ? p->runs_cap * 2 : 256;
        kp_run *grown = realloc(p->runs, sizeof *grown * (size_t)cap);
        if (!grown) {
            p->runs_lost = 1;
            return;
        }
        p->runs = grown;
        p->runs_cap = cap;
    }
    p->runs[p->runs_len] = (kp_run){partition, offset, 1};
    p->last_run[partition] = (int32_t)p->runs_len++;
}

/* Errors that only follow another: a purge (a transaction in error purges its queue) and
 * "an invalid record in the same batch". Their reports can come before the cause's. */
static int consequence(int err) {
    return err == ERR_PURGE_QUEUE || err == ERR_PURGE_INFLIGHT || err == ERR_INVALID_DIFFERENT_RECORD;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *msg, void *opaque) {
    kp_producer *p = opaque;
    (void)rk;
    if (msg->err) {
        p->failed++;
        /* the first error named is a cause where one is reported, in whatever order */
        if (!p->first_error || (consequence(p->first_error) && !consequence(msg->err))) p->first_error = msg->err;
    } else if (msg->_private == &DATA_RECORD) {
        touch(p, msg->partition, msg->offset);
    }
}

/* The producer's fatal error (its underlying code: a fenced producer's PRODUCER_FENCED),
 * noted at once when a call returns ERR__FATAL: error_cb would say so only at the next poll. */
static int note_fatal(kp_producer *p) {
    if (!p->fatal_error) p->fatal_error = rd_kafka_fatal_error(p->rk, p->fatal_reason, sizeof p->fatal_reason);
    return p->fatal_error ? p->fatal_error : ERR_FATAL;
}

static void on_error(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    kp_producer *p = opaque;
    if (p->fatal_error) return;
    if (err == ERR_FATAL) {
        p->fatal_error = rd_kafka_fatal_error(rk, p->fatal_reason, sizeof p->fatal_reason);
    } else if (err == ERR_AUTHENTICATION || err == ERR_TOPIC_AUTHORIZATION_FAILED ||
               err == ERR_CLUSTER_AUTHORIZATION_FAILED || err == ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED) {
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

/* A record refused (not for a full queue): its code. A transaction in error refuses every
 * record; the delivery reports of the records that put it there are served first, so the
 * caller can name them and why. */
static int refused(kp_producer *p, int e) {
    if (e == ERR_STATE) rd_kafka_poll(p->rk, 100);
    return e;
}

/* The handle of the topic named, kept for the producer's next batches; NULL if refused. */
static rd_kafka_topic_t *topic_handle(kp_producer *p, const char *name) {
    if (p->rkt && !strcmp(p->rkt_name, name)) return p->rkt;
    if (p->rkt) rd_kafka_topic_destroy(p->rkt);
    free(p->rkt_name);
    p->rkt_name = strdup(name);
    p->rkt = p->rkt_name ? rd_kafka_topic_new(p->rk, name, NULL) : NULL;
    return p->rkt;
}

/*
 * Produce the batch's records [0, n). Returns n, or -(i + 1) when record i is refused
 * before sending (its error code in *err), or -(n + 1) when a fatal error stops the producer
 * (the fatal error's own code in *err).
 */
int64_t kp_produce(kp_producer *p, const kp_batch *b, int *err) {
    rd_kafka_topic_t *rkt = topic_handle(p, b->topic);
    for (int64_t i = 0; i < b->n; i++) {
        const void *key = NULL;
        size_t key_len = 0;
        if (b->key_offsets &&
            (!b->key_valid || (b->key_valid[(b->key_bit0 + i) >> 3] >> ((b->key_bit0 + i) & 7) & 1))) {
            key = b->key_data + b->key_offsets[i];
            key_len = (size_t)(b->key_offsets[i + 1] - b->key_offsets[i]);
        }
        int f = b->file_index[i];
        for (;;) {
            int e = rd_kafka_producev(
                p->rk, rkt ? VT_RKT : VT_TOPIC, rkt ? (void *)rkt : (void *)b->topic, VT_MSGFLAGS, MSG_F_COPY,
                VT_OPAQUE, (void *)&DATA_RECORD,
                VT_VALUE, (void *)(b->value_data + b->value_offsets[i]),
                (size_t)(b->value_offsets[i + 1] - b->value_offsets[i]),
                VT_KEY, (void *)key, key_len, VT_TIMESTAMP, b->timestamps[i],
                VT_HEADER, "run_id", (const void *)b->run_id, (ssize_t)b->run_id_len,
                VT_HEADER, "source_file", (const void *)b->files[f], (ssize_t)b->file_lens[f], VT_END);
            if (e == 0) break;
            if (e == ERR_FATAL) {
                *err = note_fatal(p);
                return -(b->n + 1);
            }
            if (e != ERR_QUEUE_FULL) {
                *err = refused(p, e);
                return -(i + 1);
            }
            /* The local queue is full: serve delivery reports until it drains. */
            rd_kafka_poll(p->rk, 50);
            if (p->fatal_error) {
                *err = p->fatal_error;
                return -(b->n + 1);
            }
        }
    }
    rd_kafka_poll(p->rk, 0);
    return b->n;
}

/* One record of the delivery ledger, its kind in the header "kind"; 0 or the error code. */
int kp_produce_one(kp_producer *p, const char *topic, const void *key, size_t key_len, const void *value,
                   size_t value_len, const char *kind) {
    for (;;) {
        int e = rd_kafka_producev(p->rk, VT_TOPIC, topic, VT_MSGFLAGS, MSG_F_COPY, VT_KEY, key, key_len,
                                  VT_VALUE, value, value_len, VT_HEADER, "kind", (const void *)kind, (ssize_t)-1,
                                  VT_END);
        if (e == ERR_FATAL) return note_fatal(p);
        if (e != ERR_QUEUE_FULL) return refused(p, e);
        rd_kafka_poll(p->rk, 50);
        if (p->fatal_error) return p->fatal_error;
    }
}

/* One record without a key and with n headers (a dead letter); 0 or the error code. */
int kp_produce_with_headers(kp_producer *p, const char *topic, const void *value, size_t value_len, int n,
                            const char **names, const char **values, const int64_t *lens) {
    for (;;) {
        rd_kafka_headers_t *h = rd_kafka_headers_new((size_t)n);
        for (int i = 0; i < n; i++) rd_kafka_header_add(h, names[i], -1, values[i], (ssize_t)lens[i]);
        int e = rd_kafka_producev(p->rk, VT_TOPIC, topic, VT_MSGFLAGS, MSG_F_COPY, VT_VALUE, value, value_len,
                                  VT_HEADERS, h, VT_END);
        if (e == 0) return 0; /* librdkafka owns the headers now */
        rd_kafka_headers_destroy(h);
        if (e == ERR_FATAL) return note_fatal(p);
        if (e != ERR_QUEUE_FULL) return refused(p, e);
        rd_kafka_poll(p->rk, 50);
        if (p->fatal_error) return p->fatal_error;
    }
}

/*
 * Wait for every record's delivery report: 0 when rd_kafka_flush says all were served,
 * else how many are still queued or in flight (at least 1). rd_kafka_outq_len alone counts
 * pending callbacks and requests too, so it may be above 0 after a complete flush.
 */
int kp_flush(kp_producer *p, int timeout_ms) {
    int e = rd_kafka_flush(p->rk, timeout_ms);
    if (e == ERR_FATAL) note_fatal(p);
    if (e == 0) return 0;
    int left = rd_kafka_outq_len(p->rk);
    return left > 0 ? left : 1;
}

/*
 * Connect before the first call that needs a broker: a metadata request for no topic
 * (brokers only). librdkafka drops its bootstrap connection once it learns the brokers,
 * and an init_transactions made before it connects again waits for a 500 ms timer.
 */
int kp_warm(kp_producer *p, int timeout_ms) {
    const struct rd_kafka_metadata *md = NULL;
    int e = rd_kafka_metadata(p->rk, 0, NULL, &md, timeout_ms);
    if (md) rd_kafka_metadata_destroy(md);
    return e;
}

static int txn_result(kp_producer *p, rd_kafka_error_t *e) {
    if (!e) {
        p->txn_code = 0;
        p->txn_reason[0] = 0;
        return 0;
    }
    p->txn_code = rd_kafka_error_code(e);
    p->txn_fatal = rd_kafka_error_is_fatal(e);
    p->txn_retriable = rd_kafka_error_is_retriable(e);
    p->txn_abortable = rd_kafka_error_txn_requires_abort(e);
    snprintf(p->txn_reason, sizeof p->txn_reason, "%s", rd_kafka_error_string(e));
    rd_kafka_error_destroy(e);
    return p->txn_code ? p->txn_code : -1;
}

static void untouch(kp_producer *p) {
    for (int32_t i = 0; i < p->last_cap; i++) p->last_run[i] = -1;
    p->runs_len = 0;
    p->touched_count = 0;
    p->runs_lost = 0;
}

/* The current transaction's runs of consecutive offsets, (partition, first, count) each,
 * into out (up to cap runs); returns how many there are, or -1 if they are incomplete. */
int64_t kp_offset_runs(kp_producer *p, int64_t *out, int64_t cap) {
    if (p->runs_lost) return -1;
    for (int64_t i = 0; i < p->runs_len && i < cap; i++) {
        out[3 * i] = p->runs[i].partition;
        out[3 * i + 1] = p->runs[i].first;
        out[3 * i + 2] = p->runs[i].count;
    }
    return p->runs_len;
}

/* Fences every earlier producer with the same transactional.id, aborting its open transaction. */
int kp_txn_init(kp_producer *p, int timeout_ms) { return txn_result(p, rd_kafka_init_transactions(p->rk, timeout_ms)); }

int kp_txn_begin(kp_producer *p) {
    untouch(p);
    return txn_result(p, rd_kafka_begin_transaction(p->rk));
}

int kp_txn_commit(kp_producer *p, int timeout_ms) {
    return txn_result(p, rd_kafka_commit_transaction(p->rk, timeout_ms));
}

int kp_txn_abort(kp_producer *p, int timeout_ms) {
    return txn_result(p, rd_kafka_abort_transaction(p->rk, timeout_ms));
}

/* sizeof(kp_batch): Python checks its mirror against it before any call. */
size_t kp_batch_size(void) { return sizeof(kp_batch); }

int kp_txn_code(kp_producer *p) { return p->txn_code; }
int kp_txn_fatal(kp_producer *p) { return p->txn_fatal; }
int kp_txn_retriable(kp_producer *p) { return p->txn_retriable; }
int kp_txn_abortable(kp_producer *p) { return p->txn_abortable; }
const char *kp_txn_reason(kp_producer *p) { return p->txn_reason; }
int32_t kp_partitions_touched(kp_producer *p) { return p->touched_count; }
int64_t kp_failed(kp_producer *p) { return p->failed; }
int kp_first_error(kp_producer *p) { return p->first_error; }
int kp_fatal_error(kp_producer *p) { return p->fatal_error; }
const char *kp_fatal_reason(kp_producer *p) { return p->fatal_reason; }
const char *kp_err2str(int err) { return rd_kafka_err2str(err); }

/* Drop whatever is still queued or in flight (a failed task's records), then free the producer. */
void kp_destroy(kp_producer *p) {
    rd_kafka_purge(p->rk, PURGE_QUEUE | PURGE_INFLIGHT);
    rd_kafka_poll(p->rk, 0);
    if (p->rkt) rd_kafka_topic_destroy(p->rkt);
    free(p->rkt_name);
    rd_kafka_destroy(p->rk);
    free(p->runs);
    free(p->last_run);
    free(p);
}
