#include "common/transport/loopback_ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace kiln::transport {

std::vector<int> free_loopback_ports(std::size_t count) {
  std::vector<int> held;
  std::vector<int> ports;
  for (std::size_t i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    held.push_back(fd);
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : held) ::close(fd);
  return ports;
}

}  // namespace kiln::transport
