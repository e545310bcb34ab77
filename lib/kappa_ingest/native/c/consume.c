/*
 * Reading a topic back (kappa_ingest.reconcile.read_back) without a Python object per
 * record: a librdkafka consumer whose records are reduced here to what the count needs,
 * their partition, offset, timestamp, which wanted run_id header they carry and their
 * source_file header, written into arrays Python hands over, many records per call.
 * Reading back a million records of a kilobyte took ~15 us each through Python's Message
 * objects.
 *
 * librdkafka's declarations: rdkafka_abi.h.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "rdkafka_abi.h"

typedef struct rd_kafka_topic_partition_s {
    char *topic;
    int32_t partition;
    int64_t offset;
    void *metadata;
    size_t metadata_size;
    void *opaque;
    int err;
    void *_private;
} rd_kafka_topic_partition_t;
typedef struct rd_kafka_topic_partition_list_s rd_kafka_topic_partition_list_t;

void rd_kafka_conf_set_log_cb(rd_kafka_conf_t *, void (*)(const rd_kafka_t *, int, const char *, const char *));
int rd_kafka_consumer_close(rd_kafka_t *);
rd_kafka_message_t *rd_kafka_consumer_poll(rd_kafka_t *, int);
void rd_kafka_message_destroy(rd_kafka_message_t *);
int64_t rd_kafka_message_timestamp(const rd_kafka_message_t *, int *);
int rd_kafka_message_headers(const rd_kafka_message_t *, rd_kafka_headers_t **);
int rd_kafka_header_get_last(const rd_kafka_headers_t *, const char *, const void **, size_t *);
rd_kafka_topic_partition_list_t *rd_kafka_topic_partition_list_new(int);
rd_kafka_topic_partition_t *rd_kafka_topic_partition_list_add(rd_kafka_topic_partition_list_t *, const char *, int32_t);
void rd_kafka_topic_partition_list_destroy(rd_kafka_topic_partition_list_t *);
int rd_kafka_assign(rd_kafka_t *, const rd_kafka_topic_partition_list_t *);

#define CONSUMER 1
#define ERR_PARTITION_EOF (-191)
#define FILE_MAX 65536 /* room kept in the file buffer for one more record's source_file */

static void quiet(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    (void)rk, (void)level, (void)fac, (void)buf; /* errors reach Python as records' errors */
}

rd_kafka_t *kc_new(const char **names, const char **values, int n, char *errstr, size_t errlen) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    for (int i = 0; i < n; i++) {
        if (rd_kafka_conf_set(conf, names[i], values[i], errstr, errlen) != 0) {
            rd_kafka_conf_destroy(conf);
            return NULL;
        }
    }
    rd_kafka_conf_set_log_cb(conf, quiet);
    rd_kafka_t *rk = rd_kafka_new(CONSUMER, conf, errstr, errlen);
    if (!rk) rd_kafka_conf_destroy(conf);
    return rk;
}

int kc_assign(rd_kafka_t *rk, const char *topic, int n, const int32_t *partitions, const int64_t *offsets) {
    rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new(n);
    for (int i = 0; i < n; i++) rd_kafka_topic_partition_list_add(list, topic, partitions[i])->offset = offsets[i];
    int err = rd_kafka_assign(rk, list);
    rd_kafka_topic_partition_list_destroy(list);
    return err;
}

void kc_close(rd_kafka_t *rk) {
    rd_kafka_assign(rk, NULL);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
}

static int64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/*
 * Up to max records (or partition ends) polled within timeout_ms: entry k is a record of
 * partition[k] at offset[k] with timestamp[k], its run_id header the wanted[rid[k]]
 * (-1: another or none), its source_file header bytes [file_at[k], file_at[k + 1]) of
 * files; rid[k] = -2 marks a partition's end (offset[k]: the end's offset). Returns the
 * entries written, or -1 on a consumer error (its code in *err, its text in errstr).
 */
int64_t kc_poll(rd_kafka_t *rk, int timeout_ms, int64_t max, int nwanted, const char **wanted,
                const int64_t *wanted_lens, int32_t *partition, int64_t *offset, int64_t *timestamp, int32_t *rid,
                int64_t *file_at, uint8_t *files, int64_t files_cap, int *err, char *errstr, size_t errlen) {
    int64_t k = 0, used = 0, deadline = now_ms() + timeout_ms;
    file_at[0] = 0;
    while (k < max && files_cap - used >= FILE_MAX) {
        int64_t left = deadline - now_ms();
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, left > 0 ? (int)left : 0);
        if (!m) break;
        if (m->err && m->err != ERR_PARTITION_EOF) {
            *err = m->err;
            const char *text = m->payload ? (const char *)m->payload : rd_kafka_err2str(m->err);
            size_t len = m->payload ? (m->len < errlen - 1 ? m->len : errlen - 1) : strlen(text);
            if (len > errlen - 1) len = errlen - 1;
            memcpy(errstr, text, len);
            errstr[len] = 0;
            rd_kafka_message_destroy(m);
            return -1;
        }
        partition[k] = m->partition;
        offset[k] = m->offset;
        timestamp[k] = 0;
        rid[k] = -2;
        if (!m->err) {
            int type;
            timestamp[k] = rd_kafka_message_timestamp(m, &type);
            rid[k] = -1;
            rd_kafka_headers_t *headers;
            const void *value;
            size_t size;
            if (rd_kafka_message_headers(m, &headers) == 0) {
                if (rd_kafka_header_get_last(headers, "run_id", &value, &size) == 0 && value)
                    for (int w = 0; w < nwanted; w++)
                        if ((size_t)wanted_lens[w] == size && !memcmp(wanted[w], value, size)) {
                            rid[k] = w;
                            break;
                        }
                if (rid[k] >= 0 && rd_kafka_header_get_last(headers, "source_file", &value, &size) == 0 && value) {
                    if (size > FILE_MAX) size = FILE_MAX;
                    memcpy(files + used, value, size);
                    used += (int64_t)size;
                }
            }
        }
        file_at[++k] = used;
        rd_kafka_message_destroy(m);
    }
    return k;
}
