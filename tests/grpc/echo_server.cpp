// The gRPC echo server of the gRPC client test and benchmark: listens on
// 127.0.0.1 and a free port, prints the port on its first line of output,
// and serves (gRPC's synchronous server, on its own threads) until its
// standard input closes, which it does when the process that started it
// goes, however that ends.
//
//   echo_server    # prints e.g. 41237, serves until stdin reaches EOF
#include <grpcpp/grpcpp.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <memory>

#include "echo.grpc.pb.h"

namespace {

class EchoService final : public weft::echo::Echo::Service {
  ::grpc::Status Say(::grpc::ServerContext*, const weft::echo::EchoRequest* request,
                     weft::echo::EchoReply* reply) override {
    reply->set_id(request->id());
    reply->set_text(request->text());
    return ::grpc::Status::OK;
  }
};

}  // namespace

int main() {
  prctl(PR_SET_PDEATHSIG, SIGTERM);  // and if the parent dies first, this too
  EchoService service;
  int port = 0;
  ::grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", ::grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  const std::unique_ptr<::grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "echo_server: could not listen on 127.0.0.1\n");
    return 1;
  }
  std::printf("%d\n", port);
  std::fflush(stdout);
  char buffer[64];
  while (::read(STDIN_FILENO, buffer, sizeof buffer) > 0) {
  }
  server->Shutdown();
  return 0;
}
