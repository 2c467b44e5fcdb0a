#include "common/http/client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>

namespace kiln::http {

Answer get(const std::string& address, const std::string& path) {
  Answer answer;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return answer;
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(std::stoi(address.substr(address.rfind(':') + 1))));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: " + address + "\r\nAccept: text/plain\r\n\r\n";
  std::string received;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
      ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    char buffer[8192];
    for (;;) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 10000) != 1) break;
      const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
      if (got <= 0) break;
      received.append(buffer, static_cast<std::size_t>(got));
    }
  }
  ::close(fd);
  const auto head_end = received.find("\r\n\r\n");
  if (!received.starts_with("HTTP/1.1 ") || head_end == std::string::npos) return answer;
  answer.status = std::stoi(received.substr(9, 3));
  answer.head = received.substr(0, head_end);
  answer.body = received.substr(head_end + 4);
  return answer;
}

}  // namespace kiln::http
