package kappa.ingest;

import java.nio.ByteBuffer;
import java.util.Map;

import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * Gives Spark's Kafka sink the record timestamps it cannot set itself: the sink writes only
 * key, value, headers, topic and partition, so kappa-ingest puts each record's timestamp
 * (8-byte big-endian epoch milliseconds) in the header {@code __kappa_ts}; this interceptor
 * moves it into the record's timestamp and drops the header before the record is sent.
 */
public final class TimestampFromHeader implements ProducerInterceptor<byte[], byte[]> {
    public static final String HEADER = "__kappa_ts";

    @Override
    public ProducerRecord<byte[], byte[]> onSend(ProducerRecord<byte[], byte[]> record) {
        Header stamp = record.headers().lastHeader(HEADER);
        if (stamp == null || stamp.value() == null || stamp.value().length != 8) {
            return record;
        }
        RecordHeaders headers = new RecordHeaders();
        for (Header h : record.headers()) {
            if (!HEADER.equals(h.key())) {
                headers.add(h);
            }
        }
        long timestamp = ByteBuffer.wrap(stamp.value()).getLong();
        return new ProducerRecord<>(record.topic(), record.partition(), timestamp, record.key(), record.value(), headers);
    }

    @Override
    public void onAcknowledgement(RecordMetadata metadata, Exception exception) {}

    @Override
    public void close() {}

    @Override
    public void configure(Map<String, ?> configs) {}
}
