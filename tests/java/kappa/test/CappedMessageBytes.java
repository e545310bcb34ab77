package kappa.test;

import java.util.Map;
import org.apache.kafka.common.errors.PolicyViolationException;
import org.apache.kafka.server.policy.CreateTopicPolicy;

/** A managed cluster's topic policy, as Confluent Cloud words it: max.message.bytes at most 8 MiB. */
public class CappedMessageBytes implements CreateTopicPolicy {
    static final long LIMIT = 8388608L;

    @Override
    public void configure(Map<String, ?> configs) {}

    @Override
    public void validate(RequestMetadata request) throws PolicyViolationException {
        String value = request.configs().get("max.message.bytes");
        if (value != null && Long.parseLong(value) > LIMIT) {
            throw new PolicyViolationException(
                "Config property 'max.message.bytes' with value '" + value + "' exceeded max limit of " + LIMIT + ".");
        }
    }

    @Override
    public void close() {}
}
