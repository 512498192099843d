// Pinocchio's aba and computeABADerivatives in a C++ loop over given states: the issue's
// "Pinocchio's C++" side of benchmarks/robots.py, built there with mbgen's core compiler
// flags against the headers and libraries of the `pin` wheel.
//
// pinocchio_loop MODEL.bin STATES.bin REPEAT: MODEL.bin is the model Pinocchio's Python
// buildModelFromUrdf read, saved by Model.saveToBinary (the wheel ships no urdfdom
// headers to parse in C++); STATES.bin holds int64 count, int64 nv,
// then count × nv joint values, count × nv rates and count × nv torques (doubles, row
// major; revolute and prismatic joints only, nq = nv). Prints one JSON line: the best
// time per state of each loop [s] and checksums of their results (to check the states
// and the model against Pinocchio from Python).
#include <pinocchio/algorithm/aba-derivatives.hpp>
#include <pinocchio/algorithm/aba.hpp>
#include <pinocchio/serialization.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <vector>

int main(int argc, char** argv)
{
    if (argc != 4) {
        std::fprintf(stderr, "usage: pinocchio_loop MODEL.bin STATES.bin REPEAT\n");
        return 2;
    }
    pinocchio::Model model;
    model.loadFromBinary(argv[1]);  // Pinocchio's model of the URDF, saved from Python
    pinocchio::Data data(model);
    std::ifstream in(argv[2], std::ios::binary);
    std::int64_t count = 0, nv = 0;
    in.read(reinterpret_cast<char*>(&count), sizeof count);
    in.read(reinterpret_cast<char*>(&nv), sizeof nv);
    if (!in || nv != model.nv || model.nq != model.nv || count <= 0) {
        std::fprintf(stderr, "the states do not fit the model (nq %d, nv %d)\n",
                     model.nq, model.nv);
        return 1;
    }
    std::vector<double> values(static_cast<size_t>(3 * count * nv));
    in.read(reinterpret_cast<char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(double)));
    if (!in) { std::fprintf(stderr, "short states file\n"); return 1; }
    using Vector = Eigen::Map<const Eigen::VectorXd>;
    const double* q = values.data();
    const double* v = q + count * nv;
    const double* tau = v + count * nv;
    const int repeat = std::atoi(argv[3]);
    double checksum[2] = {0.0, 0.0};
    double best[2] = {std::numeric_limits<double>::infinity(),
                      std::numeric_limits<double>::infinity()};
    for (int r = 0; r < repeat; ++r) {
        for (int mode = 0; mode < 2; ++mode) {
            double sum = 0.0;
            const auto start = std::chrono::steady_clock::now();
            for (std::int64_t k = 0; k < count; ++k) {
                const Vector qk(q + k * nv, nv), vk(v + k * nv, nv), tk(tau + k * nv, nv);
                if (mode == 0) {
                    pinocchio::aba(model, data, qk, vk, tk);
                    sum += data.ddq.sum();
                } else {
                    pinocchio::computeABADerivatives(model, data, qk, vk, tk);
                    sum += data.ddq_dq.sum();
                }
            }
            const double seconds = std::chrono::duration<double>(
                std::chrono::steady_clock::now() - start).count();
            if (seconds < best[mode]) best[mode] = seconds;
            checksum[mode] = sum;
        }
    }
    std::printf("{\"aba\": %.9g, \"aba+J\": %.9g, \"sum ddq\": %.17g, \"sum ddq_dq\": %.17g}\n",
                best[0] / count, best[1] / count, checksum[0], checksum[1]);
    return 0;
}
