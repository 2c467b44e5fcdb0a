// The simulated network: delivery with delay, loss, duplication and reordering, partitions,
// and the envelopes the coordinator and agents exchange over it.
#include "sim/cluster/world.h"

namespace kiln::sim::cluster {

void Simulation::World::log(const std::string& source, const std::string& text) {
  std::string line = fmt::format("{:>10} {:<12} {}", now, source, text);
  for (unsigned char c : line) log_digest = (log_digest ^ c) * kFnvPrime;
  log_digest = (log_digest ^ '\n') * kFnvPrime;
  if (options.record_log) log_lines.push_back(std::move(line));
}

void Simulation::World::fail(std::string invariant) {
  if (violation) return;
  violation = Violation{options.seed, options.fault_period_ms, steps, now, std::move(invariant)};
  log("sim", "VIOLATION " + violation->invariant);
}

std::string Simulation::World::endpoint_name(const Endpoint& e) const {
  switch (e.kind) {
    case Endpoint::Kind::coordinator: return "coordinator";
    case Endpoint::Kind::agent: return agents[e.index].identity.node_id;
    case Endpoint::Kind::client: return clients[e.index].key_name;
  }
  return "?";
}

bool Simulation::World::partitioned(const Endpoint& a, const Endpoint& b) const {
  for (const Endpoint* e : {&a, &b}) {
    if (e->kind == Endpoint::Kind::agent && now < agents[e->index].partitioned_until) return true;
  }
  return false;
}

void Simulation::World::send(Endpoint from, Endpoint to, protocol::Body body, std::uint64_t id, std::uint64_t corr) {
  ++counters.messages_sent;
  Packet packet;
  packet.from = from;
  packet.to = to;
  packet.type = std::string(protocol::type_name(body));
  packet.envelope = protocol::make_envelope(std::move(body), id, corr);
  if (options.faults.network.round_trip_codec) {
    auto frames = protocol::encode(packet.envelope);
    if (!frames) {
      fail(fmt::format("the codec refused a {} from {} to {}: {}", packet.type, endpoint_name(from),
                       endpoint_name(to), frames.error().describe()));
      return;
    }
    packet.frames = std::move(*frames);
    packet.envelope = protocol::Envelope{};
  }
  const NetworkFaults& net = options.faults.network;
  auto planned = std::find_if(planned_drops.begin(), planned_drops.end(), [&](const PlannedDrop& d) {
    return from.kind == Endpoint::Kind::agent && from.index == d.node && now >= d.from && packet.type == d.type;
  });
  if (planned != planned_drops.end()) {
    planned_drops.erase(planned);
    ++counters.messages_dropped;
    log("sim", fmt::format("the network loses a {} from {}", packet.type, endpoint_name(from)));
    return;
  }
  if (partitioned(from, to) || (!quiet && network_rng.bernoulli(net.loss_probability))) {
    ++counters.messages_dropped;
    return;
  }
  int copies = 1;
  if (std::find(net.always_duplicate_types.begin(), net.always_duplicate_types.end(), packet.type) !=
          net.always_duplicate_types.end() ||
      (!quiet && network_rng.bernoulli(net.duplicate_probability))) {
    copies = 2;
    ++counters.messages_duplicated;
  }
  for (int i = 0; i < copies; ++i) {
    TimeMs at = now + between(network_rng, net.delay_min_ms, net.delay_max_ms);
    if (net.preserve_order) {
      TimeMs& last = link_last_delivery[link_key(from, to)];
      at = std::max(at, last);
      last = at;
    }
    schedule_at(at, ev::Deliver{packet});
  }
}

// The routing id the coordinator knows a sender by, and the sender's key name.
std::pair<std::string, std::string> Simulation::World::coordinator_peer(const Endpoint& from) const {
  if (from.kind == Endpoint::Kind::agent) {
    const SimAgent& a = agents[from.index];
    return {fmt::format("{}/{}", a.identity.node_id, from.connection), a.identity.node_id};
  }
  return {clients[from.index].key_name, clients[from.index].key_name};
}

// The envelope a delivered packet carries. The coordinator takes it through the real shell's
// admission (decode, or refuse with an error reply to the sender). A message that does not
// decode is a violation wherever it goes: everything the cores say must.
std::optional<protocol::Envelope> Simulation::World::open(Packet& p) {
  if (!options.faults.network.round_trip_codec) return std::move(p.envelope);
  Result<protocol::Envelope> decoded;
  if (p.to.kind == Endpoint::Kind::coordinator) {
    const auto [peer, sender] = coordinator_peer(p.from);
    decoded = coordinator::admit_message(
        coordinator::ReceivedFrames{peer, p.from.kind == Endpoint::Kind::agent, sender, p.frames.header,
                                    p.frames.body},
        coordinator_limits, coordinator_io);
  } else {
    decoded = protocol::decode(p.frames.header, p.frames.body);
  }
  if (!decoded) {
    fail(fmt::format("the codec refused to decode a {} from {}: {}", p.type, endpoint_name(p.from),
                     decoded.error().describe()));
    return std::nullopt;
  }
  return std::move(*decoded);
}

}  // namespace kiln::sim::cluster
