// A PostgreSQL server of the tests' own: initdb and pg_ctl from Debian's postgresql package
// in a temporary directory, listening only on a unix socket there (no port to collide on), as an
// unprivileged user when the tests run as root (initdb refuses root). One server serves a whole
// test program, started on first use and stopped when the program exits; each test takes a
// fresh database of its own. Durability is not under test here, so the server runs with fsync
// off to keep the tests fast; kiln's sessions still ask for synchronous_commit.
#pragma once

#include <libpq-fe.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include <doctest/doctest.h>

namespace kiln::testing {

class PostgresServer {
 public:
  static constexpr const char* kSuperuser = "kiln_test";
  // A role that must log in with its password (scram-sha-256), for tests of password_file.
  static constexpr const char* kPasswordRole = "kiln_password";

  // The newest installed server's programs (/usr/lib/postgresql/<version>/bin), or empty.
  static std::filesystem::path installed_bin_dir() {
    std::filesystem::path newest;
    int newest_version = 0;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
      const int version = std::atoi(entry.path().filename().c_str());
      if (version > newest_version && std::filesystem::exists(entry.path() / "bin" / "initdb")) {
        newest_version = version;
        newest = entry.path() / "bin";
      }
    }
    return newest;
  }

  // The test program's server, started on first use; nullptr (with a message saying so, once)
  // where PostgreSQL is not installed. A server that fails to start fails the test.
  static PostgresServer* shared() {
    static const std::filesystem::path bin = installed_bin_dir();
    if (bin.empty()) {
      static const bool said = [] {
        std::fprintf(stderr, "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): the PostgreSQL "
                             "runs of these tests are skipped; scripts/setup installs it\n");
        return true;
      }();
      (void)said;
      return nullptr;
    }
    static std::unique_ptr<PostgresServer> server(new PostgresServer(bin));
    return server.get();
  }

  ~PostgresServer() {
    (void)as_server_user(pg_ctl() + " -D " + data_dir() + " -m fast -w stop >/dev/null");
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  const std::filesystem::path& socket_dir() const { return dir_; }

  // A libpq connection string for `database`, as `user` (the superuser by default).
  std::string url(const std::string& database, const std::string& user = kSuperuser) const {
    return "host=" + dir_.string() + " port=5432 dbname=" + database + " user=" + user;
  }

  // A new empty database, named after no other.
  std::string create_database() {
    const std::string name = "kiln_" + std::to_string(++databases_);
    const auto [ok, message] = run_sql("postgres", "CREATE DATABASE " + name + " OWNER " + kPasswordRole + ";");
    REQUIRE_MESSAGE(ok, message);
    return name;
  }

  // Runs `sql` in `database` as the superuser: whether it succeeded, and the server's message.
  std::pair<bool, std::string> run_sql(const std::string& database, const std::string& sql) const {
    PGconn* connection = PQconnectdb(url(database).c_str());
    std::pair<bool, std::string> outcome{false, PQerrorMessage(connection)};
    if (PQstatus(connection) == CONNECTION_OK) {
      PGresult* result = PQexec(connection, sql.c_str());
      const ExecStatusType status = PQresultStatus(result);
      outcome = {status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK, PQresultErrorMessage(result)};
      PQclear(result);
    }
    PQfinish(connection);
    return outcome;
  }

  // The rows `sql` returns in `database`, each a line of its values "|" apart.
  std::string query(const std::string& database, const std::string& sql) const {
    PGconn* connection = PQconnectdb(url(database).c_str());
    REQUIRE_MESSAGE(PQstatus(connection) == CONNECTION_OK, PQerrorMessage(connection));
    PGresult* result = PQexec(connection, sql.c_str());
    std::string rows;
    const bool ok = PQresultStatus(result) == PGRES_TUPLES_OK;
    const std::string error = PQresultErrorMessage(result);
    for (int r = 0; ok && r < PQntuples(result); ++r) {
      for (int c = 0; c < PQnfields(result); ++c) rows += (c ? "|" : "") + std::string(PQgetvalue(result, r, c));
      rows += "\n";
    }
    PQclear(result);
    PQfinish(connection);
    REQUIRE_MESSAGE(ok, error);
    return rows;
  }

 private:
  explicit PostgresServer(std::filesystem::path bin) : bin_(std::move(bin)) {
    std::string pattern = (std::filesystem::temp_directory_path() / "kiln-postgres-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    dir_ = pattern;
    if (::geteuid() == 0) {
      const passwd* nobody = ::getpwnam("nobody");
      REQUIRE_MESSAGE(nobody != nullptr, "the tests run as root and there is no user nobody to run PostgreSQL as");
      REQUIRE(::chown(dir_.c_str(), nobody->pw_uid, nobody->pw_gid) == 0);
    }
    // Quick to make: no waiting for the disk, and the C locale that every system has.
    const std::string initdb = (bin_ / "initdb").string() + " -D " + data_dir() + " -U " + kSuperuser +
                               " --auth=trust --no-sync --encoding=UTF8 --locale=C >" + log_file() + " 2>&1";
    REQUIRE_MESSAGE(as_server_user(initdb) == 0, "initdb failed: " << read_log());
    // The password role logs in with its password; everyone else is trusted on this socket,
    // which only this directory's owner can reach.
    append_as_server_user(data_dir() + "/pg_hba.conf",
                          std::string("local all ") + kPasswordRole + " scram-sha-256\nlocal all all trust\n", true);
    append_as_server_user(data_dir() + "/postgresql.conf",
                          "listen_addresses = ''\nunix_socket_directories = '" + dir_.string() +
                              "'\nfsync = off\nfull_page_writes = off\nmax_connections = 50\n",
                          false);
    const std::string start = pg_ctl() + " -D " + data_dir() + " -l " + log_file() + " -w -t 120 start >/dev/null";
    REQUIRE_MESSAGE(as_server_user(start) == 0, "pg_ctl start failed: " << read_log());
    const auto [ok, message] = run_sql("postgres", std::string("CREATE ROLE ") + kPasswordRole +
                                                       " LOGIN PASSWORD 'correct horse';");
    REQUIRE_MESSAGE(ok, message);
  }

  std::string data_dir() const { return (dir_ / "data").string(); }
  std::string log_file() const { return (dir_ / "server.log").string(); }
  std::string pg_ctl() const { return (bin_ / "pg_ctl").string(); }
  std::string read_log() const {
    std::ifstream in(log_file());
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  // Runs a shell command as the user that owns the server: nobody when the tests run as root.
  int as_server_user(const std::string& command) const {
    const std::string quoted = "'" + command + "'";
    return std::system(((::geteuid() == 0 ? "runuser -u nobody -- /bin/sh -c " : "/bin/sh -c ") + quoted).c_str());
  }

  void append_as_server_user(const std::string& file, const std::string& text, bool replace) const {
    const std::string written = (dir_ / "written").string();
    std::ofstream(written) << text;
    const std::string command = "cat " + written + (replace ? " > " : " >> ") + file;
    REQUIRE(as_server_user(command) == 0);
  }

  std::filesystem::path bin_;
  std::filesystem::path dir_;
  int databases_ = 0;
};

}  // namespace kiln::testing
