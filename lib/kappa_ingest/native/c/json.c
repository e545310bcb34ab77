/*
 * Record values (contract §2), in C: one pass per Arrow batch instead of polars' struct
 * -> JSON encoder (~3 µs a row for 30 columns on this machine).
 *
 * A value is  [lead + event] + prefix[file] + "name":value, ... + "}}"  where Python
 * renders the parts that are the same for many rows: each file's prefix
 * {"ingest_ts":"...","source_file":"...","data":{  (with event time, the lead
 * {"ingest_ts":"...","event_ts":  and the row's event time as a JSON string come first,
 * and the prefix starts at ,"source_file"), and each column's "name":. A value is null
 * for a null field; a text column's is the text as a JSON string, escaped exactly as
 * polars (and serde_json) escape: \" \\ \b \t \n \f \r, other bytes below 0x20 as
 * \u00xx, the rest (UTF-8 included) as is; a typed column's (raw) is its JSON literal,
 * which Python rendered (numbers, true/false), copied as it is. kj_size bounds the
 * output's size, kj_write fills Arrow buffers (int32 offsets, data) that Python allocated
 * with it, and ROOM bytes more.
 *
 * Fields are short (a debs2012 row: 67 fields of 3 to 8 bytes), so a field's copy is one
 * 16-byte move where its source has 16 readable bytes, not a libc call: the calls took
 * more time than the bytes (perf of the encoder: memmove 29%, kj_write 12%).
 */
#include <stdint.h>
#include <string.h>

typedef struct {
    const int32_t *offsets; /* at the array's first element */
    const uint8_t *data;
    const uint8_t *valid;   /* Arrow validity bitmap, NULL when no field is null */
    int64_t bit0;           /* the array's offset into its bitmap */
    int64_t nulls;          /* how many fields are null */
    int64_t raw;            /* 1: the text is a JSON literal, written unquoted */
} kj_column;

static const char HEX[] = "0123456789abcdef";

/* What the output may be written beyond its last value (a short copy's whole move), and
 * what each name's text has readable after it. */
#define ROOM 16

/* s[0, len) to out; s_end: where the bytes readable from s end. */
static inline uint8_t *copy(uint8_t *out, const uint8_t *s, int32_t len, const uint8_t *s_end) {
    if (len <= ROOM && s_end - s >= ROOM)
        memcpy(out, s, ROOM); /* a constant size: one move, inlined */
    else
        memcpy(out, s, (size_t)len);
    return out + len;
}

/* Extra bytes a byte takes when escaped: 1 for \" \\ \b \t \n \f \r, 5 for \u00xx. */
static uint8_t EXTRA[256];

__attribute__((constructor)) static void init_extra(void) {
    for (int b = 0; b < 0x20; b++) EXTRA[b] = 5;
    EXTRA['"'] = EXTRA['\\'] = EXTRA['\b'] = EXTRA['\t'] = EXTRA['\n'] = EXTRA['\f'] = EXTRA['\r'] = 1;
}

static inline int is_null(const kj_column *c, int64_t i) {
    return c->valid && !((c->valid[(c->bit0 + i) >> 3] >> ((c->bit0 + i) & 7)) & 1);
}

static inline uint8_t *escape(uint8_t *out, const uint8_t *s, int32_t len) {
    int32_t run = 0; /* start of the bytes copied as they are, in one memcpy */
    for (int32_t i = 0; i < len; i++) {
        uint8_t b = s[i];
        if (!EXTRA[b]) continue;
        memcpy(out, s + run, (size_t)(i - run));
        out += i - run;
        run = i + 1;
        *out++ = '\\';
        switch (b) {
            case '"': *out++ = '"'; break;
            case '\\': *out++ = '\\'; break;
            case '\b': *out++ = 'b'; break;
            case '\t': *out++ = 't'; break;
            case '\n': *out++ = 'n'; break;
            case '\f': *out++ = 'f'; break;
            case '\r': *out++ = 'r'; break;
            default:
                *out++ = 'u'; *out++ = '0'; *out++ = '0';
                *out++ = HEX[b >> 4]; *out++ = HEX[b & 15];
        }
    }
    memcpy(out, s + run, (size_t)(len - run));
    return out + (len - run);
}

/* Extra bytes escaping adds to data[0, len). Most columns have none: one OR over the bytes,
 * which the compiler vectorises a register of bytes at a time, says so; only a column with
 * such a byte is counted, byte by byte in int64 (perf: the count alone took a quarter of
 * the encoder's time on debs2012). */
static int64_t extra_in(const uint8_t *data, int64_t len) {
    uint8_t any = 0;
    for (int64_t i = 0; i < len; i++) {
        uint8_t b = data[i];
        any |= (uint8_t)((b < 0x20) | (b == '"') | (b == '\\'));
    }
    if (!any) return 0;
    int64_t extra = 0;
    for (int64_t i = 0; i < len; i++) {
        uint8_t b = data[i];
        int short_escape = (b == '"') | (b == '\\') | (b == '\b') | (b == '\t') | (b == '\n') | (b == '\f') | (b == '\r');
        extra += short_escape ? 1 : (b < 0x20) * 5;
    }
    return extra;
}

/* At least the bytes of all n values (exactly, unless null fields own bytes in the data
 * buffer, which Arrow allows); col_extra[c] gets at least the bytes escaping adds to
 * column c. One pass over each column's data buffer, not per field. */
int64_t kj_size(int64_t n, int ncols, const kj_column *cols, const int64_t *name_lens,
                const int32_t *file_index, const int64_t *prefix_lens, int64_t *col_extra,
                const kj_column *event, int64_t lead_len) {
    int64_t total = 0;
    for (int c = 0; c < ncols; c++) {
        const kj_column *col = &cols[c];
        int64_t fixed = name_lens[c]; /* "name": with the comma before it */
        int64_t text = col->offsets[n] - col->offsets[0];
        col_extra[c] = col->raw ? 0 : extra_in(col->data + col->offsets[0], text);
        total += n * fixed + text + col_extra[c] + (col->raw ? 0 : 2 * (n - col->nulls)) + 4 * col->nulls;
    }
    if (event) /* ISO times: nothing to escape */
        total += n * (lead_len + 2) + (event->offsets[n] - event->offsets[0]) + 4 * event->nulls;
    for (int64_t i = 0; i < n; i++) total += prefix_lens[file_index[i]] + 2;
    return total;
}

/* end: where the column's values end in its data (its last offset). */
static inline uint8_t *quoted(uint8_t *out, const kj_column *col, int64_t i, int64_t extra, const uint8_t *end) {
    if (is_null(col, i)) {
        memcpy(out, "null", 4);
        return out + 4;
    }
    const uint8_t *text = col->data + col->offsets[i];
    int32_t len = col->offsets[i + 1] - col->offsets[i];
    if (col->raw) return copy(out, text, len, end);
    *out++ = '"';
    out = extra ? escape(out, text, len) : copy(out, text, len, end);
    *out++ = '"';
    return out;
}

/* Write the n values into out_data (room for kj_size's bytes and ROOM more), their n + 1
 * offsets into out_offsets; col_extra as kj_size gave it (a column with nothing to escape
 * is copied without looking); names[c] with ROOM readable bytes after it, the comma before
 * it for c > 0. Returns the bytes written. */
int64_t kj_write(int64_t n, int ncols, const kj_column *cols, const char **names, const int64_t *name_lens,
                 const int32_t *file_index, const char **prefixes, const int64_t *prefix_lens,
                 const int64_t *col_extra, int32_t *out_offsets, uint8_t *out_data,
                 const kj_column *event, const char *lead, int64_t lead_len) {
    uint8_t *out = out_data;
    const uint8_t *ends[ncols];
    for (int c = 0; c < ncols; c++) ends[c] = cols[c].data + cols[c].offsets[n];
    const uint8_t *event_end = event ? event->data + event->offsets[n] : NULL;
    for (int64_t i = 0; i < n; i++) {
        out_offsets[i] = (int32_t)(out - out_data);
        if (event) {
            memcpy(out, lead, (size_t)lead_len);
            out = quoted(out + lead_len, event, i, 0, event_end);
        }
        int f = file_index[i];
        memcpy(out, prefixes[f], (size_t)prefix_lens[f]);
        out += prefix_lens[f];
        for (int c = 0; c < ncols; c++) {
            const uint8_t *name = (const uint8_t *)names[c];
            out = copy(out, name, (int32_t)name_lens[c], name + name_lens[c] + ROOM);
            out = quoted(out, &cols[c], i, col_extra[c], ends[c]);
        }
        *out++ = '}';
        *out++ = '}';
    }
    out_offsets[n] = (int32_t)(out - out_data);
    return out - out_data;
}

/* Whether every non-null field of a text column is already the JSON literal of its value
 * as the polars encoder writes it, so a typed column can be written as its text, neither
 * parsed nor formatted. Kinds: 1 BOOLEAN (true, false); 2 an integer type, at most
 * max_digits digits (fewer than the type holds: no range check needed); 3 DOUBLE in plain
 * decimal notation, as polars formats a double: an integer part without leading zeros, a
 * fraction without trailing zeros (or exactly ".0"), at most 15 significant digits (so
 * the double's shortest round-trip digits are the text's own) and a magnitude polars
 * does not write with an exponent (below 1e15, at least 1e-4); 4 DATE, yyyy-MM-dd; 5
 * TIMESTAMP, yyyy-MM-ddTHH:mm:ss.SSSZ (the two as JSON strings). Returns 0 when every
 * field is, else the index + 1 of the first that is not. */
static int literal_bool(const uint8_t *s, int32_t len) {
    return (len == 4 && !memcmp(s, "true", 4)) || (len == 5 && !memcmp(s, "false", 5));
}

static int literal_int(const uint8_t *s, int32_t len, int max_digits) {
    int32_t i = 0;
    if (len == 1 && s[0] == '0') return 1;
    if (i < len && s[i] == '-') i++;
    if (i >= len || s[i] < '1' || s[i] > '9' || len - i > max_digits) return 0;
    for (; i < len; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

static int literal_double(const uint8_t *s, int32_t len) {
    int32_t i = 0, int_digits = 0;
    if (i < len && s[i] == '-') i++;
    if (i >= len) return 0;
    if (s[i] == '0') {
        i++;
    } else {
        while (i < len && s[i] >= '0' && s[i] <= '9') { i++; int_digits++; }
        if (int_digits == 0 || int_digits > 15) return 0;
    }
    if (i >= len || s[i] != '.') return 0;
    const uint8_t *frac = s + ++i;
    int32_t frac_digits = len - i;
    if (frac_digits == 0) return 0;
    for (; i < len; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    if (frac_digits == 1 && frac[0] == '0') return 1;
    if (frac[frac_digits - 1] == '0') return 0;
    if (int_digits > 0) return int_digits + frac_digits <= 15;
    int32_t zeros = 0;
    while (frac[zeros] == '0') zeros++;
    return zeros <= 3 && frac_digits - zeros <= 15;
}

static int digits(const uint8_t *s, int n) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

/* yyyy-MM-dd, a day of the calendar (year 1 on) */
static int literal_date(const uint8_t *s, int32_t len) {
    static const int DAYS[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (len < 10 || s[4] != '-' || s[7] != '-') return 0;
    int y = digits(s, 4), m = digits(s + 5, 2), d = digits(s + 8, 2);
    if (y < 1 || m < 1 || m > 12 || d < 1) return 0;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= DAYS[m - 1] + (m == 2 && leap);
}

/* yyyy-MM-ddTHH:mm:ss.SSSZ, as the records write a UTC timestamp */
static int literal_timestamp(const uint8_t *s, int32_t len) {
    if (len != 24 || !literal_date(s, 10) || s[10] != 'T' || s[13] != ':' || s[16] != ':' || s[19] != '.'
        || s[23] != 'Z')
        return 0;
    int h = digits(s + 11, 2), mi = digits(s + 14, 2), sec = digits(s + 17, 2), ms = digits(s + 20, 3);
    return h >= 0 && h < 24 && mi >= 0 && mi < 60 && sec >= 0 && sec < 60 && ms >= 0;
}

/* Byte classes over a column's bytes at once: a loop the compiler vectorizes, where the
 * checks above branch on each byte (a wide30 DOUBLE field 18 ns with them, 9 with this;
 * an INT 8 and 4). */
typedef struct {
    int64_t other, dash, dot; /* bytes neither a digit nor '-' nor '.'; '-'s; '.'s */
} byte_counts;

static byte_counts count_bytes(const uint8_t *p, const uint8_t *end) {
    byte_counts c = {0, 0, 0};
    while (p < end) {
        /* uint8_t counters within a run of at most 255 bytes keep the loop's lanes narrow */
        const uint8_t *stop = end - p > 255 ? p + 255 : end;
        uint8_t other = 0, dash = 0, dot = 0;
        for (; p < stop; p++) {
            uint8_t b = *p;
            dash += b == '-';
            dot += b == '.';
            other += (uint8_t)(b - '0') > 9 && b != '-' && b != '.';
        }
        c.other += other, c.dash += dash, c.dot += dot;
    }
    return c;
}

/* Whether a column without nulls passes kind 2 (an integer) or 3 (DOUBLE) for every field,
 * proven from its byte classes and each field's ends alone. 0 proves nothing: the field
 * by field checks then say which field fails, if any. Sound because the classes leave each
 * field only digits but for one '-' (counted against the fields that start with it) and,
 * for DOUBLE, one '.' (each field has one found from its end; no more than the fields in all). */
static int all_numbers_literal(int64_t n, const kj_column *col, int kind, int max_digits) {
    const int32_t *off = col->offsets;
    const uint8_t *data = col->data;
    byte_counts c = count_bytes(data + off[0], data + off[n]);
    if (c.other || (kind == 2 && c.dot) || (kind == 3 && c.dot != n)) return 0;
    int64_t negative = 0;
    int bad = 0; /* or-ed, not branched on: which fields fail is unpredictable */
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *s = data + off[i];
        int32_t len = off[i + 1] - off[i];
        if (len < 2) { /* one digit, or not a number */
            bad |= len == 0 || (kind == 3 || s[0] == '-');
            continue;
        }
        int32_t neg = s[0] == '-';
        negative += neg;
        int lead_zero = s[neg] == '0';
        if (kind == 2) {
            bad |= lead_zero | (len - neg > max_digits);
            continue;
        }
        /* the field's '.', found from its end (a fraction is short) */
        int32_t dot = len - 1;
        while (dot > neg && s[dot] != '.') dot--;
        int32_t int_digits = dot - neg, frac_digits = len - dot - 1;
        const uint8_t *frac = s + dot + 1;
        int zero_int = lead_zero & (int_digits == 1);
        int just_zero = frac_digits == 1 && frac[0] == '0'; /* &&: without a fraction, frac[0] lies past the field */
        bad |= (s[dot] != '.') | (int_digits == 0) | (frac_digits == 0) | (lead_zero & !zero_int)
               | (!zero_int & (int_digits > 15));
        if (bad | just_zero) continue;
        bad |= frac[frac_digits - 1] == '0';
        if (!zero_int) {
            bad |= int_digits + frac_digits > 15;
            continue;
        }
        int32_t zeros = 0;
        while (zeros < frac_digits && frac[zeros] == '0') zeros++;
        bad |= (zeros > 3) | (frac_digits - zeros > 15);
    }
    return !bad && negative == c.dash;
}

int64_t kj_not_literal(int64_t n, const kj_column *col, int kind, int max_digits) {
    if (n > 0 && !col->valid && (kind == 2 || kind == 3) && all_numbers_literal(n, col, kind, max_digits))
        return 0;
    for (int64_t i = 0; i < n; i++) {
        if (is_null(col, i)) continue;
        const uint8_t *s = col->data + col->offsets[i];
        int32_t len = col->offsets[i + 1] - col->offsets[i];
        int ok = kind == 1   ? literal_bool(s, len)
                 : kind == 2 ? literal_int(s, len, max_digits)
                 : kind == 3 ? literal_double(s, len)
                 : kind == 4 ? len == 10 && literal_date(s, len)
                             : literal_timestamp(s, len);
        if (!ok) return i + 1;
    }
    return 0;
}
