#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>

namespace {

// Names each test case on stderr as it starts and ends, with the time since the run began, so a
// test that ctest stops at its timeout says which case it was in (doctest prints nothing until a
// case fails).
class ProgressListener : public doctest::IReporter {
 public:
  explicit ProgressListener(const doctest::ContextOptions&) {}

  void test_case_start(const doctest::TestCaseData& test) override {
    current_ = &test;
    case_started_ = Clock::now();
    std::fprintf(stderr, "[%7.1fs] start: %s (%s:%u)\n", seconds_since(run_started_), test.m_name, test.m_file.c_str(),
                 test.m_line);
  }
  void test_case_end(const doctest::CurrentTestCaseStats&) override {
    if (current_ == nullptr) return;
    std::fprintf(stderr, "[%7.1fs] end:   %s, after %.1fs\n", seconds_since(run_started_), current_->m_name,
                 seconds_since(case_started_));
    current_ = nullptr;
  }

  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

  Clock::time_point run_started_ = Clock::now();
  Clock::time_point case_started_ = run_started_;
  const doctest::TestCaseData* current_ = nullptr;
};

}  // namespace

REGISTER_LISTENER("kiln-progress", 1, ProgressListener);
