#pragma once
// Rules of the agent session (docs/protocol.md §8) that every agent implementation follows.

namespace kiln::protocol {

// Hellos an agent sends on an open connection whose coordinator went silent, before it opens a
// new one: a stalled coordinator reads them when it resumes, with no new CURVE handshake each.
constexpr int kHellosOnOpenConnection = 3;

}  // namespace kiln::protocol
