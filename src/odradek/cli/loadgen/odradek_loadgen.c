/*
 * odradek_loadgen: a compiled Kafka load generator for Odradek's benchmarks and `odradek bench`.
 *
 * Written for this project against librdkafka's C API so that the client is not the
 * bottleneck when the broker is measured (the Python client loop tops out first).
 * Built and run by src/odradek/cli/_loadgen.py; prints one JSON object on stdout at the end.
 *
 *   odradek_loadgen produce -b HOST:PORT -t TOPIC -n RECORDS [-s SIZE] [-r RATE] [-a ACKS]
 *                   [-z CODEC] [-p PARTITIONS] [-c CLIENTS] [-d SECONDS] [-P] [-X key=value]...
 *   odradek_loadgen consume -b HOST:PORT -t TOPIC -n RECORDS [-p PARTITIONS] [-c CLIENTS]
 *                   [-i IDLE_SECONDS] [-X key=value]...
 *   odradek_loadgen e2e     -b HOST:PORT -t TOPIC -r RATE -d SECONDS [-w WARMUP_SECONDS]
 *                   [-s SIZE] [-a ACKS] [-p PARTITIONS] [-X key=value]... [-Y key=value]...
 *   odradek_loadgen ping    -b HOST:PORT -t TOPIC -n RECORDS [-s SIZE] [-a ACKS] [-z CODEC]
 *                   [-T SECONDS_PER_RECORD] [-X key=value]... [-Y key=value]...
 *
 * produce: CLIENTS producer instances (one rd_kafka_t each, in their own thread, plus one
 *   delivery-report poller thread each) send RECORDS records in total (split evenly), record i
 *   of an instance to partition i mod PARTITIONS (with -P: no partition given, librdkafka's
 *   partitioner picks, as for records without a key in any client), paced to RATE records/s
 *   in total (-1: as fast as possible). With -d the instances send until SECONDS have passed
 *   instead (-n -1).
 *   Window: the first produce() call (after every instance is connected and has metadata)
 *   to the last delivery report. Latency: produce() call -> delivery report, per record.
 *   With -x TXN_RECORDS each instance is a transactional producer (transactional.id
 *   odradek-loadgen-<pid>-<topic>-<instance>, init_transactions() before the window) that sends
 *   its records in transactions of TXN_RECORDS: begin, produce, commit_transaction(). The window
 *   then ends at the last commit; commit_ms times each commit_transaction() call.
 * consume: CLIENTS consumer instances split the partitions (partition p to instance
 *   p mod CLIENTS), assign() them from the beginning (group.id odradek-loadgen, never joined,
 *   no commits) and count records until RECORDS have arrived in total (or, with -i, until no
 *   record came for IDLE_SECONDS). Window: first record to last record; records_after_first
 *   leaves out the records of the first receipt (they arrived at the window's start).
 *   assigned_s: program start to every instance connected and assigned.
 *   max_gap_ms / gaps_over_100ms: the pauses between two receipts of records of an instance
 *   (librdkafka's fetch.queue.backoff.ms stalls show here).
 * e2e: one paced producer writes its CLOCK_MONOTONIC send time into each value; one consumer
 *   in this process (all partitions, from the beginning) reads it back: receive - send, for
 *   records sent after WARMUP_SECONDS. -X sets the producer's configuration, -Y the consumer's.
 * ping: Kafka's EndToEndLatency: one record at a time (linger.ms=0 unless -X sets it; the
 *   partitioner picks the partition), flushed, and timed until a consumer in this process
 *   (every partition assigned at its end offset) receives it; the value received must be the
 *   value sent (its first 10 bytes are the record's number). -T: seconds to wait for each
 *   record (default 60). -X: the producer's configuration, -Y the consumer's.
 *
 * -R: random (incompressible) values instead of the default text-like ones (random words,
 * ~2-3x compressible, 1024 distinct values); -U: one value of random upper-case letters, sent
 * every time (kafka-producer-perf-test's values). -T: give up after that many seconds (default
 * 300; 0: no limit).
 *
 * -X key=value is passed to rd_kafka_conf_set() for every instance (global or topic
 * properties: linger.ms, batch.size, fetch.max.bytes, ...). Exit status 0 when every record
 * was delivered / consumed without error, 1 otherwise, 2 for a usage error.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#define MAX_CONF 64
#define PAYLOAD_POOL 1024
#define CONSUME_BATCH 10000

/* ------------------------------------------------------------------------------------ */
/* time */

static inline int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* t0 + secs, or never when secs <= 0 (-T 0: no limit) */
static int64_t deadline_after(int64_t t0, double secs) {
    if (secs <= 0 || secs > 9e8) return INT64_MAX;
    return t0 + (int64_t)(secs * 1e9);
}

static void sleep_until_ns(int64_t t) {
    struct timespec ts = {.tv_sec = t / 1000000000, .tv_nsec = t % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* ------------------------------------------------------------------------------------ */
/* latency histogram: microseconds, exact below 256 us, then 128 sub-buckets per power of
 * two (under 0.8 % error); sum and maximum kept exactly */

#define H_LINEAR 256
#define H_SUB 128
#define H_OCTAVES 48
#define H_BUCKETS (H_LINEAR + H_OCTAVES * H_SUB)

typedef struct {
    uint64_t count;
    uint64_t sum_ns;
    int64_t max_ns;
    uint64_t b[H_BUCKETS];
} histogram_t;

static int h_index(uint64_t us) {
    if (us < H_LINEAR) return (int)us;
    int e = 63 - __builtin_clzll(us); /* >= 8 */
    int idx = H_LINEAR + (e - 8) * H_SUB + (int)((us >> (e - 7)) - H_SUB);
    return idx < H_BUCKETS ? idx : H_BUCKETS - 1;
}

/* midpoint of a bucket, in microseconds */
static double h_value(int idx) {
    if (idx < H_LINEAR) return idx + 0.5;
    int e = (idx - H_LINEAR) / H_SUB + 8;
    int m = (idx - H_LINEAR) % H_SUB + H_SUB;
    double width = (double)(1ULL << (e - 7));
    return m * width + width / 2;
}

static void h_add(histogram_t *h, int64_t ns) {
    if (ns < 0) ns = 0;
    h->count++;
    h->sum_ns += (uint64_t)ns;
    if (ns > h->max_ns) h->max_ns = ns;
    h->b[h_index((uint64_t)ns / 1000)]++;
}

static void h_merge(histogram_t *into, const histogram_t *h) {
    into->count += h->count;
    into->sum_ns += h->sum_ns;
    if (h->max_ns > into->max_ns) into->max_ns = h->max_ns;
    for (int i = 0; i < H_BUCKETS; i++) into->b[i] += h->b[i];
}

/* nearest-rank percentile, milliseconds */
static double h_pct_ms(const histogram_t *h, double q) {
    if (h->count == 0) return 0;
    uint64_t rank = (uint64_t)(q * (double)h->count + 0.999999999);
    if (rank < 1) rank = 1;
    uint64_t seen = 0;
    for (int i = 0; i < H_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            double v = h_value(i) / 1000.0;
            double max = h->max_ns / 1e6;
            return v < max ? v : max;
        }
    }
    return h->max_ns / 1e6;
}

/* ------------------------------------------------------------------------------------ */
/* options */

typedef struct {
    const char *mode;
    const char *brokers;
    const char *topic;
    int64_t records;
    int size;
    double rate;
    const char *acks;
    const char *codec;
    int partitions; /* 0: every partition of the topic */
    int clients;
    double duration;
    double warmup;
    double timeout;
    double idle;        /* consume: stop after this many seconds without a record (0: never) */
    int random_payload; /* 1: random bytes (-R); 2: one value of upper-case letters (-U) */
    int partitioner;    /* -P: RD_KAFKA_PARTITION_UA, librdkafka's partitioner picks */
    int64_t txn_records; /* -x: records per transaction (0: no transactions) */
    int nconf, nconf2;
    char *conf[MAX_CONF][2];  /* -X */
    char *conf2[MAX_CONF][2]; /* -Y (e2e consumer) */
} opts_t;

static opts_t O = {
    .records = -1, .size = 100, .rate = -1, .acks = NULL, .codec = NULL, .partitions = 0,
    .clients = 1, .duration = 0, .warmup = 1.0, .timeout = -1, .idle = 0,
};

static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "odradek_loadgen: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(2);
}

static void usage(void) {
    fprintf(stderr,
            "usage: odradek_loadgen produce|consume|e2e|ping -b HOST:PORT -t TOPIC [-n RECORDS] [-s SIZE]\n"
            "       [-r RATE] [-a ACKS] [-z CODEC] [-p PARTITIONS] [-c CLIENTS] [-d SECONDS]\n"
            "       [-w WARMUP_SECONDS] [-T TIMEOUT_SECONDS] [-i IDLE_SECONDS] [-R | -U] [-P]\n"
            "       [-x TXN_RECORDS] [-X key=value]... [-Y key=value]...\n");
    exit(2);
}

static void add_conf(char *(*conf)[2], int *n, const char *kv) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv) die("-X/-Y wants key=value, got '%s'", kv);
    if (*n >= MAX_CONF) die("too many -X/-Y settings");
    conf[*n][0] = strndup(kv, (size_t)(eq - kv));
    conf[*n][1] = strdup(eq + 1);
    (*n)++;
}

static void set_conf(rd_kafka_conf_t *conf, const char *k, const char *v) {
    char err[512];
    if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK) die("%s=%s: %s", k, v, err);
}

static rd_kafka_conf_t *base_conf(int producer_side) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set_conf(conf, "bootstrap.servers", O.brokers);
    set_conf(conf, "client.id", "odradek-loadgen");
    int two_clients = strcmp(O.mode, "e2e") == 0 || strcmp(O.mode, "ping") == 0;
    if (producer_side) {
        /* ping: each record goes out at once (EndToEndLatency's producer), unless -X says */
        if (strcmp(O.mode, "ping") == 0) set_conf(conf, "linger.ms", "0");
        if (O.acks) set_conf(conf, "acks", O.acks);
        if (O.codec) set_conf(conf, "compression.codec", O.codec);
        for (int i = 0; i < O.nconf; i++) set_conf(conf, O.conf[i][0], O.conf[i][1]);
    } else {
        /* assign() needs a group; it never joins it nor commits */
        set_conf(conf, "group.id", "odradek-loadgen");
        set_conf(conf, "enable.partition.eof", "false");
        set_conf(conf, "enable.auto.commit", "false");
        set_conf(conf, "enable.auto.offset.store", "false");
        char *(*c)[2] = two_clients ? O.conf2 : O.conf;
        int n = two_clients ? O.nconf2 : O.nconf;
        for (int i = 0; i < n; i++) set_conf(conf, c[i][0], c[i][1]);
    }
    return conf;
}

/* partition count of the topic (waits for it to have leaders) */
static int topic_partitions(rd_kafka_t *rk) {
    int64_t deadline = now_ns() + (int64_t)(30 * 1e9);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, O.topic, NULL);
    while (now_ns() < deadline) {
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR && md->topic_cnt == 1 && md->topics[0].err == 0 &&
            md->topics[0].partition_cnt > 0) {
            int n = md->topics[0].partition_cnt, ok = 1;
            for (int i = 0; i < n; i++)
                if (md->topics[0].partitions[i].leader < 0) ok = 0;
            rd_kafka_metadata_destroy(md);
            if (ok) {
                rd_kafka_topic_destroy(rkt);
                return n;
            }
        } else if (md) {
            rd_kafka_metadata_destroy(md);
        }
        usleep(50000);
    }
    die("topic %s: no metadata with leaders for every partition after 30 s", O.topic);
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* payloads: a pool of distinct values of text-like content (compressible about like log
 * lines), or random bytes with -R */

static char *pool[PAYLOAD_POOL];

static void make_payloads(int size) {
    static const char letters[] = "abcdefghijklmnopqrstuvwxyz";
    char words[256][12];
    unsigned seed = 12345;
    for (int w = 0; w < 256; w++) {
        int len = 3 + (int)(rand_r(&seed) % 8);
        for (int i = 0; i < len; i++) words[w][i] = letters[rand_r(&seed) % 26];
        words[w][len] = 0;
    }
    for (int p = 0; p < PAYLOAD_POOL; p++) {
        if (O.random_payload == 2 && p > 0) {
            pool[p] = pool[0];
            continue;
        }
        pool[p] = malloc((size_t)size > 16 ? (size_t)size : 16);
        if (O.random_payload == 2) {
            unsigned s2 = (unsigned)now_ns();
            for (int i = 0; i < size; i++) pool[p][i] = (char)('A' + rand_r(&s2) % 26);
            continue;
        }
        if (O.random_payload) {
            for (int i = 0; i < size; i++) pool[p][i] = (char)rand_r(&seed);
            continue;
        }
        int i = 0;
        while (i < size) {
            const char *w = words[rand_r(&seed) % 256];
            for (int j = 0; w[j] && i < size; j++) pool[p][i++] = w[j];
            if (i < size) pool[p][i++] = ' ';
        }
    }
}

/* ------------------------------------------------------------------------------------ */
/* produce */

typedef struct {
    int id;
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    int64_t to_send; /* -1: until the deadline */
    double rate;     /* this instance's share, records/s; <= 0: unpaced */
    int stamp;       /* e2e: write the send time into each value */
    int64_t sent;
    atomic_int_fast64_t delivered;
    atomic_int_fast64_t errors;
    int64_t last_dr_ns;
    histogram_t lat;
    int64_t transactions, last_commit_ns; /* -x */
    histogram_t commit;                   /* -x: commit_transaction() durations */
    char first_error[256];
    atomic_int producing_done;
    atomic_int pid_assigned; /* an idempotent producer holds its producer id (from its statistics) */
    pthread_t thr, poller;
} producer_t;

static pthread_barrier_t start_barrier;
static int64_t window_start_ns;
static atomic_int stop_flag;

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    producer_t *p = opaque;
    int64_t t = now_ns();
    if (m->err) {
        if (atomic_fetch_add(&p->errors, 1) == 0)
            snprintf(p->first_error, sizeof(p->first_error), "%s", rd_kafka_err2str(m->err));
    } else {
        h_add(&p->lat, t - (int64_t)(intptr_t)m->_private);
    }
    p->last_dr_ns = t;
    atomic_fetch_add(&p->delivered, 1);
}

static void *poller_main(void *arg) {
    producer_t *p = arg;
    /* -x: the producing thread serves its own delivery reports. commit_transaction() flushes by
       polling in steps of up to 10 ms; a report taken by this thread would leave each such
       step to run out, and every commit would wait ~10 ms longer than the broker took. */
    if (O.txn_records > 0) return NULL;
    for (;;) {
        int done = atomic_load(&p->producing_done);
        if (done && atomic_load(&p->delivered) >= p->sent) break;
        rd_kafka_poll(p->rk, 50);
        if (done == 2) break; /* gave up */
    }
    return NULL;
}

static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
    (void)rk;
    (void)len;
    producer_t *p = opaque;
    static const char key[] = "\"idemp_state\":", assigned[] = "\"Assigned\"";
    const char *st = strstr(json, key);
    if (st) {
        st += sizeof(key) - 1;
        st += strspn(st, " "); /* librdkafka writes "key": "value" */
        if (strncmp(st, assigned, sizeof(assigned) - 1) == 0) atomic_store(&p->pid_assigned, 1);
    }
    return 0; /* librdkafka frees json */
}

/* -X enable.idempotence=true: the producer asks for a producer id before its first send */
static int idempotent(void) {
    int on = 0;
    for (int i = 0; i < O.nconf; i++)
        if (strcmp(O.conf[i][0], "enable.idempotence") == 0) on = strcmp(O.conf[i][1], "true") == 0;
    return on;
}

static producer_t *producer_new(int id, int nparts_wanted, int *nparts_out) {
    producer_t *p = calloc(1, sizeof(*p));
    p->id = id;
    rd_kafka_conf_t *conf = base_conf(1);
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_conf_set_opaque(conf, p);
    int idem = idempotent();
    if (idem) {
        /* librdkafka asks for the producer id when the handle is made; no broker connection is up
           then, so it tries again on a 500 ms timer. That start-up is the client's, not the
           broker's: the window starts once the id is there (the statistics say when). */
        set_conf(conf, "statistics.interval.ms", "50");
        rd_kafka_conf_set_stats_cb(conf, stats_cb);
    }
    if (O.txn_records > 0) {
        char tid[256];
        snprintf(tid, sizeof(tid), "odradek-loadgen-%d-%s-%d", (int)getpid(), O.topic, id);
        set_conf(conf, "transactional.id", tid);
    }
    char err[512];
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!p->rk) die("rd_kafka_new: %s", err);
    int n = topic_partitions(p->rk); /* connected, metadata known: outside the window */
    if (O.txn_records > 0) { /* the producer id and epoch: outside the window */
        rd_kafka_error_t *e = rd_kafka_init_transactions(p->rk, 30000);
        if (e) die("init_transactions: %s", rd_kafka_error_string(e));
    }
    int64_t pid_deadline = now_ns() + (int64_t)(30 * 1e9);
    while (idem && !atomic_load(&p->pid_assigned)) {
        if (now_ns() > pid_deadline) die("idempotent producer: no producer id after 30 s");
        rd_kafka_poll(p->rk, 20);
    }
    if (nparts_wanted > 0 && nparts_wanted < n) n = nparts_wanted;
    *nparts_out = n;
    p->rkt = rd_kafka_topic_new(p->rk, O.topic, NULL);
    return p;
}

static int g_nparts;

static void txn_failed(producer_t *p, const char *what, rd_kafka_error_t *e) {
    if (atomic_fetch_add(&p->errors, 1) == 0)
        snprintf(p->first_error, sizeof(p->first_error), "%s: %s", what, rd_kafka_error_string(e));
    rd_kafka_error_destroy(e);
}

/* -x: commit the open transaction; 0 when it failed (counted as an error) */
static int commit(producer_t *p) {
    int64_t c0 = now_ns();
    rd_kafka_error_t *e = rd_kafka_commit_transaction(p->rk, (int)(O.timeout > 0 ? O.timeout * 1000 : 300000));
    int64_t c1 = now_ns();
    if (e) {
        txn_failed(p, "commit_transaction", e);
        return 0;
    }
    h_add(&p->commit, c1 - c0);
    p->transactions++;
    p->last_commit_ns = c1;
    return 1;
}

static void *producer_main(void *arg) {
    producer_t *p = arg;
    char *stampbuf = malloc((size_t)O.size > 16 ? (size_t)O.size : 16);
    pthread_barrier_wait(&start_barrier);
    int64_t t0 = window_start_ns;
    /* e2e: a broker that cannot keep up stops the paced sends at 3x the planned time */
    double dur = strcmp(O.mode, "e2e") == 0 ? 3 * (O.duration + O.warmup) : O.duration;
    int64_t deadline = dur > 0 ? t0 + (int64_t)(dur * 1e9) : INT64_MAX;
    int64_t interval = p->rate > 0 ? (int64_t)(1e9 / p->rate) : 0;
    int part = O.partitioner ? RD_KAFKA_PARTITION_UA : p->id % g_nparts;
    for (int64_t i = 0; p->to_send < 0 || i < p->to_send; i++) {
        int64_t t = now_ns();
        if (interval) {
            int64_t due = t0 + (int64_t)((double)i * 1e9 / p->rate);
            if (due > t) {
                sleep_until_ns(due);
                t = now_ns();
            }
        }
        if (t >= deadline || atomic_load(&stop_flag)) break;
        if (O.txn_records > 0 && i % O.txn_records == 0) {
            if (i > 0 && !commit(p)) goto out;
            rd_kafka_error_t *e = rd_kafka_begin_transaction(p->rk);
            if (e) {
                txn_failed(p, "begin_transaction", e);
                goto out;
            }
        }
        void *payload = pool[(p->id * 7919 + i) % PAYLOAD_POOL];
        int flags = O.txn_records > 0 ? 0 : RD_KAFKA_MSG_F_BLOCK; /* -x: nobody else polls */
        if (p->stamp) {
            memcpy(stampbuf, payload, (size_t)O.size);
            memcpy(stampbuf, &t, sizeof(t));
            payload = stampbuf;
            flags |= RD_KAFKA_MSG_F_COPY;
        }
        while (rd_kafka_produce(p->rkt, part, flags, payload, (size_t)O.size, NULL, 0,
                                (void *)(intptr_t)t) == -1) {
            rd_kafka_resp_err_t e = rd_kafka_last_error();
            if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                atomic_fetch_add(&p->errors, 1);
                snprintf(p->first_error, sizeof(p->first_error), "produce: %s", rd_kafka_err2str(e));
                goto out;
            }
            if (O.txn_records > 0) rd_kafka_poll(p->rk, 1);
            else usleep(100);
        }
        p->sent++;
        if (!O.partitioner && ++part >= g_nparts) part = 0;
    }
    if (O.txn_records > 0 && p->sent > 0) commit(p); /* the last transaction is still open */
out:
    atomic_store(&p->producing_done, 1);
    free(stampbuf);
    return NULL;
}

/* wait for every delivery report (bounded by the timeout); returns the number outstanding */
static int64_t producers_finish(producer_t **ps, int n, int64_t deadline) {
    int64_t outstanding = 0;
    for (int i = 0; i < n; i++) pthread_join(ps[i]->thr, NULL);
    for (int i = 0; i < n; i++) {
        while (atomic_load(&ps[i]->delivered) < ps[i]->sent && now_ns() < deadline) usleep(1000);
        if (atomic_load(&ps[i]->delivered) < ps[i]->sent) atomic_store(&ps[i]->producing_done, 2);
        pthread_join(ps[i]->poller, NULL);
        outstanding += ps[i]->sent - atomic_load(&ps[i]->delivered);
    }
    return outstanding;
}

static void print_latency(const char *name, const histogram_t *h) {
    printf("\"%s\": {\"count\": %" PRIu64 ", \"avg\": %.3f, \"p50\": %.3f, \"p95\": %.3f, \"p99\": %.3f, "
           "\"p999\": %.3f, \"max\": %.3f}",
           name, h->count, h->count ? h->sum_ns / 1e6 / (double)h->count : 0.0, h_pct_ms(h, 0.5),
           h_pct_ms(h, 0.95), h_pct_ms(h, 0.99), h_pct_ms(h, 0.999), h->max_ns / 1e6);
}

static double cpu_seconds_self(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
        else putchar(*s);
    }
    putchar('"');
}

/* jemalloc when it is loaded (preloaded: it has mallctl), else the C library's malloc */
static const char *allocator(void) {
    return dlsym(RTLD_DEFAULT, "mallctl") ? "jemalloc" : "libc";
}

static void print_common(void) {
    printf("\"librdkafka\": \"%s\", \"allocator\": \"%s\", \"topic\": ", rd_kafka_version_str(), allocator());
    json_string(O.topic);
    printf(", \"record_bytes\": %d, \"clients\": %d, \"partitions\": %d, ", O.size, O.clients, g_nparts);
}

static int run_produce(void) {
    if (O.records < 0 && O.duration <= 0) die("produce wants -n RECORDS or -d SECONDS");
    producer_t **ps = calloc((size_t)O.clients, sizeof(*ps));
    for (int i = 0; i < O.clients; i++) ps[i] = producer_new(i, O.partitions, &g_nparts);
    for (int i = 0; i < O.clients; i++) {
        ps[i]->to_send = O.records < 0 ? -1 : O.records / O.clients + (i < O.records % O.clients);
        ps[i]->rate = O.rate > 0 ? O.rate / O.clients : 0;
    }
    double cpu0 = cpu_seconds_self();
    pthread_barrier_init(&start_barrier, NULL, (unsigned)O.clients + 1);
    for (int i = 0; i < O.clients; i++) {
        pthread_create(&ps[i]->thr, NULL, producer_main, ps[i]);
        pthread_create(&ps[i]->poller, NULL, poller_main, ps[i]);
    }
    window_start_ns = now_ns();
    pthread_barrier_wait(&start_barrier);
    int64_t deadline = O.timeout > 0 ? deadline_after(window_start_ns, O.duration + O.timeout) : INT64_MAX;
    int64_t outstanding = producers_finish(ps, O.clients, deadline);
    histogram_t *lat = calloc(1, sizeof(*lat)), *commits = calloc(1, sizeof(*commits));
    int64_t transactions = 0;
    int64_t sent = 0, delivered = 0, errors = 0, last = window_start_ns;
    const char *first_error = "";
    for (int i = 0; i < O.clients; i++) {
        producer_t *p = ps[i];
        sent += p->sent;
        delivered += atomic_load(&p->delivered);
        errors += atomic_load(&p->errors);
        if (p->last_dr_ns > last) last = p->last_dr_ns;
        if (p->last_commit_ns > last) last = p->last_commit_ns;
        transactions += p->transactions;
        h_merge(commits, &p->commit);
        if (!*first_error && p->first_error[0]) first_error = p->first_error;
        h_merge(lat, &p->lat);
    }
    double secs = (last - window_start_ns) / 1e9;
    int64_t ok = delivered - errors;
    double cpu = cpu_seconds_self() - cpu0;
    printf("{\"mode\": \"produce\", ");
    print_common();
    printf("\"acks\": \"%s\", \"compression\": \"%s\", \"target_rate\": %.0f, ", O.acks ? O.acks : "default",
           O.codec ? O.codec : "none", O.rate);
    printf("\"records\": %" PRId64 ", \"sent\": %" PRId64 ", \"bytes\": %" PRId64 ", \"seconds\": %.6f, "
           "\"records_per_s\": %.1f, \"mb_per_s\": %.3f, ",
           ok, sent, ok * O.size, secs, secs > 0 ? ok / secs : 0.0,
           secs > 0 ? (double)ok * O.size / secs / 1e6 : 0.0);
    printf("\"errors\": %" PRId64 ", \"undelivered\": %" PRId64 ", \"first_error\": ", errors, outstanding);
    json_string(first_error);
    printf(", \"client_cpu_s\": %.3f, \"latency_ms\": {", cpu);
    print_latency("produce_to_ack", lat);
    if (O.txn_records > 0) {
        printf(", ");
        print_latency("commit", commits);
    }
    printf("}, \"transaction_records\": %" PRId64 ", \"transactions\": %" PRId64 ", ", O.txn_records, transactions);
    printf("\"window\": \"first produce() to last %s\"}\n",
           O.txn_records > 0 ? "commit_transaction()" : "delivery report");
    fflush(stdout);
    for (int i = 0; i < O.clients; i++) {
        rd_kafka_topic_destroy(ps[i]->rkt);
        rd_kafka_destroy(ps[i]->rk);
    }
    return (errors || outstanding || (O.records >= 0 && sent != O.records)) ? 1 : 0;
}

/* ------------------------------------------------------------------------------------ */
/* consume */

typedef struct {
    int id;
    rd_kafka_t *rk;
    rd_kafka_queue_t *q;
    int64_t first_ns, last_ns;
    int64_t max_gap_ns, gaps_over_100ms; /* between two receipts of records */
    int64_t count, bytes, errors;
    int64_t first_batch; /* records of the first receipt */
    int64_t stamp_after_ns; /* e2e: only records sent after this count */
    int e2e;
    histogram_t lat;
    char first_error[256];
    pthread_t thr;
} consumer_t;

static atomic_int_fast64_t consumed_total;
static int64_t consume_target; /* INT64_MAX in e2e until the producer is done */
static atomic_int_fast64_t e2e_target;
static atomic_int_fast64_t last_receipt_ns; /* -i: any instance's last record (or the start) */

static consumer_t *consumer_new(int id, int nclients, int nparts_wanted) {
    consumer_t *c = calloc(1, sizeof(*c));
    c->id = id;
    char err[512];
    rd_kafka_conf_t *conf = base_conf(0);
    c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (!c->rk) die("rd_kafka_new: %s", err);
    int n = topic_partitions(c->rk);
    if (nparts_wanted > 0 && nparts_wanted < n) n = nparts_wanted;
    g_nparts = n;
    rd_kafka_poll_set_consumer(c->rk);
    c->q = rd_kafka_queue_get_consumer(c->rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
    for (int p = id; p < n; p += nclients)
        rd_kafka_topic_partition_list_add(l, O.topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    if (l->cnt > 0) {
        /* find the group coordinator now (a fresh broker may create __consumer_offsets for
         * it), not while records are being counted */
        rd_kafka_committed(c->rk, l, 30000);
        for (int i = 0; i < l->cnt; i++) l->elems[i].offset = RD_KAFKA_OFFSET_BEGINNING;
        rd_kafka_resp_err_t e = rd_kafka_assign(c->rk, l);
        if (e) die("assign: %s", rd_kafka_err2str(e));
    }
    rd_kafka_topic_partition_list_destroy(l);
    return c;
}

static int64_t current_target(void) {
    return consume_target == INT64_MAX ? atomic_load(&e2e_target) : consume_target;
}

static void *consumer_main(void *arg) {
    consumer_t *c = arg;
    rd_kafka_message_t **msgs = malloc(sizeof(*msgs) * CONSUME_BATCH);
    int64_t deadline = O.timeout > 0 ? deadline_after(now_ns(), O.duration + O.warmup + O.timeout) : INT64_MAX;
    int64_t idle_ns = O.idle > 0 ? (int64_t)(O.idle * 1e9) : INT64_MAX;
    while (atomic_load(&consumed_total) < current_target() && now_ns() < deadline) {
        if (idle_ns != INT64_MAX && now_ns() - atomic_load(&last_receipt_ns) > idle_ns) break;
        /* consume_batch_queue() waits until the batch is full or the timeout passed: take what
         * is queued without waiting, and when nothing is, wait for one record */
        ssize_t n = rd_kafka_consume_batch_queue(c->q, 0, msgs, CONSUME_BATCH);
        if (n <= 0) n = rd_kafka_consume_batch_queue(c->q, 100, msgs, 1);
        if (n <= 0) continue;
        int64_t t = now_ns();
        int64_t good = 0;
        for (ssize_t i = 0; i < n; i++) {
            rd_kafka_message_t *m = msgs[i];
            if (m->err) {
                if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF && c->errors++ == 0)
                    snprintf(c->first_error, sizeof(c->first_error), "%s", rd_kafka_message_errstr(m));
            } else {
                good++;
                c->bytes += (int64_t)m->len + (int64_t)m->key_len;
                if (c->e2e && m->len >= 8) {
                    int64_t sent;
                    memcpy(&sent, m->payload, sizeof(sent));
                    if (sent >= c->stamp_after_ns) h_add(&c->lat, t - sent);
                }
            }
            rd_kafka_message_destroy(m);
        }
        if (good) {
            if (c->first_ns) {
                int64_t gap = t - c->last_ns;
                if (gap > c->max_gap_ns) c->max_gap_ns = gap;
                if (gap > 100000000) c->gaps_over_100ms++;
            } else {
                c->first_ns = t;
                c->first_batch = good;
            }
            c->last_ns = t;
            c->count += good;
            atomic_fetch_add(&consumed_total, good);
            atomic_store(&last_receipt_ns, t);
        }
    }
    free(msgs);
    return NULL;
}

static int run_consume(void) {
    if (O.records <= 0) die("consume wants -n RECORDS");
    consume_target = O.records;
    consumer_t **cs = calloc((size_t)O.clients, sizeof(*cs));
    int64_t t_assign = now_ns();
    double cpu0 = cpu_seconds_self();
    for (int i = 0; i < O.clients; i++) cs[i] = consumer_new(i, O.clients, O.partitions);
    int64_t t_assigned = now_ns();
    atomic_store(&last_receipt_ns, t_assigned);
    for (int i = 0; i < O.clients; i++) pthread_create(&cs[i]->thr, NULL, consumer_main, cs[i]);
    for (int i = 0; i < O.clients; i++) pthread_join(cs[i]->thr, NULL);
    int64_t count = 0, bytes = 0, errors = 0, first = INT64_MAX, last = 0, max_gap = 0, gaps = 0;
    int64_t first_batch = 0;
    const char *first_error = "";
    for (int i = 0; i < O.clients; i++) {
        consumer_t *c = cs[i];
        count += c->count;
        bytes += c->bytes;
        errors += c->errors;
        if (c->first_ns && c->first_ns < first) {
            first = c->first_ns;
            first_batch = c->first_batch;
        }
        if (c->last_ns > last) last = c->last_ns;
        if (c->max_gap_ns > max_gap) max_gap = c->max_gap_ns;
        gaps += c->gaps_over_100ms;
        if (!*first_error && c->first_error[0]) first_error = c->first_error;
    }
    double secs = count > 0 ? (last - first) / 1e9 : 0;
    double cpu = cpu_seconds_self() - cpu0;
    printf("{\"mode\": \"consume\", ");
    print_common();
    printf("\"records\": %" PRId64 ", \"bytes\": %" PRId64 ", \"seconds\": %.6f, \"records_per_s\": %.1f, "
           "\"mb_per_s\": %.3f, \"records_after_first\": %" PRId64 ", \"assigned_s\": %.6f, "
           "\"assign_to_last_s\": %.6f, \"errors\": %" PRId64 ", \"first_error\": ",
           count, bytes, secs, secs > 0 ? count / secs : 0.0, secs > 0 ? bytes / secs / 1e6 : 0.0,
           count - first_batch, (t_assigned - t_assign) / 1e9, count > 0 ? (last - t_assign) / 1e9 : 0.0, errors);
    json_string(first_error);
    printf(", \"max_gap_ms\": %.3f, \"gaps_over_100ms\": %" PRId64 ", \"client_cpu_s\": %.3f, "
           "\"window\": \"first record received to last record received\"}\n",
           max_gap / 1e6, gaps, cpu);
    fflush(stdout);
    for (int i = 0; i < O.clients; i++) {
        rd_kafka_queue_destroy(cs[i]->q);
        rd_kafka_consumer_close(cs[i]->rk);
        rd_kafka_destroy(cs[i]->rk);
    }
    return (errors || count < O.records) ? 1 : 0;
}

/* ------------------------------------------------------------------------------------ */
/* e2e */

static int run_e2e(void) {
    if (O.rate <= 0 || O.duration <= 0) die("e2e wants -r RATE and -d SECONDS");
    O.clients = 1;
    consume_target = INT64_MAX;
    atomic_store(&e2e_target, INT64_MAX);
    consumer_t *c = consumer_new(0, 1, O.partitions);
    c->e2e = 1;
    int nparts;
    producer_t *p = producer_new(0, O.partitions, &nparts);
    g_nparts = nparts;
    double total = O.duration + O.warmup;
    p->to_send = (int64_t)(O.rate * total);
    p->rate = O.rate;
    p->stamp = 1;
    if (O.size < 8) O.size = 8;
    pthread_create(&c->thr, NULL, consumer_main, c);
    usleep(300000); /* the consumer's first fetch is in flight before the first record */
    double cpu0 = cpu_seconds_self();
    pthread_barrier_init(&start_barrier, NULL, 2);
    pthread_create(&p->thr, NULL, producer_main, p);
    pthread_create(&p->poller, NULL, poller_main, p);
    window_start_ns = now_ns();
    c->stamp_after_ns = window_start_ns + (int64_t)(O.warmup * 1e9);
    pthread_barrier_wait(&start_barrier);
    int64_t outstanding = producers_finish(&p, 1, deadline_after(window_start_ns, O.timeout > 0 ? total + O.timeout : 0));
    double send_secs = (p->last_dr_ns - window_start_ns) / 1e9;
    atomic_store(&e2e_target, p->sent - atomic_load(&p->errors));
    pthread_join(c->thr, NULL);
    double cpu = cpu_seconds_self() - cpu0;
    printf("{\"mode\": \"e2e\", ");
    print_common();
    printf("\"acks\": \"%s\", \"target_rate\": %.0f, \"achieved_rate\": %.1f, \"warmup_s\": %.3f, ",
           O.acks ? O.acks : "default", O.rate, send_secs > 0 ? p->sent / send_secs : 0.0, O.warmup);
    printf("\"sent\": %" PRId64 ", \"received\": %" PRId64 ", \"errors\": %" PRId64 ", \"undelivered\": %" PRId64
           ", \"client_cpu_s\": %.3f, \"latency_ms\": {",
           p->sent, c->count, atomic_load(&p->errors) + c->errors, outstanding, cpu);
    print_latency("end_to_end", &c->lat);
    printf(", ");
    print_latency("produce_to_ack", &p->lat);
    printf("}, \"window\": \"end_to_end: CLOCK_MONOTONIC before produce() to the consumer's receipt, records "
           "sent after the warm-up\"}\n");
    fflush(stdout);
    rd_kafka_topic_destroy(p->rkt);
    rd_kafka_destroy(p->rk);
    rd_kafka_queue_destroy(c->q);
    rd_kafka_consumer_close(c->rk);
    rd_kafka_destroy(c->rk);
    return (atomic_load(&p->errors) || c->errors || outstanding || c->count < p->sent) ? 1 : 0;
}

/* ------------------------------------------------------------------------------------ */
/* ping: one record at a time, send to the consumer's receipt */

static volatile int ping_dr_done;
static volatile rd_kafka_resp_err_t ping_dr_err;

static void ping_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    ping_dr_err = m->err;
    ping_dr_done = 1;
}

static int ms_left(int64_t deadline, int cap) {
    if (deadline == INT64_MAX) return cap;
    int64_t left = (deadline - now_ns()) / 1000000;
    if (left < 0) return 0;
    return left < cap ? (int)left : cap;
}

static int run_ping(void) {
    if (O.records <= 0) die("ping wants -n RECORDS");
    char err[512];
    /* the consumer first: every partition assigned at its end offset before anything is sent */
    rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, base_conf(0), err, sizeof(err));
    if (!c) die("rd_kafka_new: %s", err);
    g_nparts = topic_partitions(c);
    rd_kafka_poll_set_consumer(c);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(g_nparts);
    for (int part = 0; part < g_nparts; part++) {
        int64_t lo = 0, hi = 0;
        rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(c, O.topic, part, &lo, &hi, 30000);
        if (e) die("end offset of %s [%d]: %s", O.topic, part, rd_kafka_err2str(e));
        rd_kafka_topic_partition_list_add(l, O.topic, part)->offset = hi;
    }
    rd_kafka_resp_err_t e = rd_kafka_assign(c, l);
    if (e) die("assign: %s", rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(l);

    rd_kafka_conf_t *conf = base_conf(1);
    rd_kafka_conf_set_dr_msg_cb(conf, ping_dr_cb);
    rd_kafka_t *pr = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!pr) die("rd_kafka_new: %s", err);
    topic_partitions(pr); /* connected, metadata known */
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(pr, O.topic, NULL);

    size_t size = (size_t)O.size;
    char *value = malloc(size > 16 ? size : 16);
    unsigned seed = (unsigned)now_ns();
    for (size_t i = 0; i < size; i++) value[i] = (char)('A' + rand_r(&seed) % 26);
    histogram_t *lat = calloc(1, sizeof(*lat));
    int64_t done = 0;
    char first_error[256] = "";
    int64_t per_record = O.timeout > 0 ? (int64_t)(O.timeout * 1e9) : INT64_MAX;
    double cpu0 = cpu_seconds_self();
    for (int64_t i = 0; i < O.records; i++) {
        if (size >= 10) {
            char tag[24];
            snprintf(tag, sizeof(tag), "%010" PRId64, i % (int64_t)10000000000);
            memcpy(value, tag, 10);
        }
        ping_dr_done = 0;
        int64_t t0 = now_ns();
        int64_t deadline = per_record == INT64_MAX ? INT64_MAX : t0 + per_record;
        if (rd_kafka_produce(rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, value, size, NULL, 0, NULL) == -1) {
            snprintf(first_error, sizeof(first_error), "send failed: %s", rd_kafka_err2str(rd_kafka_last_error()));
            break;
        }
        while (!ping_dr_done && now_ns() < deadline) rd_kafka_flush(pr, ms_left(deadline, 1000));
        if (!ping_dr_done || ping_dr_err) {
            snprintf(first_error, sizeof(first_error), "send failed: %s",
                     ping_dr_done ? rd_kafka_err2str(ping_dr_err) : "no acknowledgement in time");
            break;
        }
        int got = 0, same = 0;
        int64_t t = 0;
        while (!got && now_ns() < deadline) {
            rd_kafka_message_t *m = rd_kafka_consumer_poll(c, ms_left(deadline, 500));
            if (!m) continue;
            t = now_ns();
            if (!m->err) {
                got = 1;
                same = m->len == size && (size == 0 || memcmp(m->payload, value, size) == 0);
            }
            rd_kafka_message_destroy(m);
        }
        if (!got) {
            snprintf(first_error, sizeof(first_error), "record %" PRId64 " did not come back within %g s", i,
                     O.timeout);
            break;
        }
        if (!same) {
            snprintf(first_error, sizeof(first_error),
                     "record %" PRId64 ": the consumer read a different record than was sent", i);
            break;
        }
        h_add(lat, t - t0);
        done++;
    }
    double cpu = cpu_seconds_self() - cpu0;
    printf("{\"mode\": \"ping\", ");
    print_common();
    printf("\"acks\": \"%s\", \"compression\": \"%s\", \"records\": %" PRId64 ", \"planned\": %" PRId64
           ", \"errors\": %d, \"first_error\": ",
           O.acks ? O.acks : "default", O.codec ? O.codec : "none", done, O.records, done < O.records);
    json_string(first_error);
    printf(", \"client_cpu_s\": %.3f, \"latency_ms\": {", cpu);
    print_latency("end_to_end", lat);
    printf("}, \"window\": \"CLOCK_MONOTONIC before produce() to the consumer's receipt, one record at a "
           "time\"}\n");
    fflush(stdout);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_flush(pr, 5000);
    rd_kafka_destroy(pr);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    return done == O.records ? 0 : 1;
}

/* ------------------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-') usage();
    O.mode = argv[1];
    optind = 2;
    int opt;
    while ((opt = getopt(argc, argv, "b:t:n:s:r:a:z:p:c:d:w:T:i:RUPx:X:Y:h")) != -1) {
        switch (opt) {
        case 'b': O.brokers = optarg; break;
        case 't': O.topic = optarg; break;
        case 'n': O.records = strtoll(optarg, NULL, 10); break;
        case 's': O.size = atoi(optarg); break;
        case 'r': O.rate = atof(optarg); break;
        case 'a': O.acks = optarg; break;
        case 'z': O.codec = optarg; break;
        case 'p': O.partitions = atoi(optarg); break;
        case 'c': O.clients = atoi(optarg); break;
        case 'd': O.duration = atof(optarg); break;
        case 'w': O.warmup = atof(optarg); break;
        case 'T': O.timeout = atof(optarg); break;
        case 'i': O.idle = atof(optarg); break;
        case 'R': O.random_payload = 1; break;
        case 'U': O.random_payload = 2; break;
        case 'P': O.partitioner = 1; break;
        case 'x': O.txn_records = strtoll(optarg, NULL, 10); break;
        case 'X': add_conf(O.conf, &O.nconf, optarg); break;
        case 'Y': add_conf(O.conf2, &O.nconf2, optarg); break;
        default: usage();
        }
    }
    if (!O.brokers || !O.topic) usage();
    if (O.clients < 1 || O.size < 0) die("-c must be >= 1 and -s >= 0");
    if (O.timeout < 0) O.timeout = strcmp(O.mode, "ping") == 0 ? 60 : 300;
    if (strcmp(O.mode, "produce") == 0 || strcmp(O.mode, "e2e") == 0) make_payloads(O.size < 8 ? 8 : O.size);
    if (strcmp(O.mode, "produce") == 0) return run_produce();
    if (strcmp(O.mode, "consume") == 0) return run_consume();
    if (strcmp(O.mode, "e2e") == 0) return run_e2e();
    if (strcmp(O.mode, "ping") == 0) return run_ping();
    usage();
    return 2;
}
