// Hostile model files (share/docs/reliability.md): attributes of unexpected class, rank or size, absurd
// sizes in /config, datasets whose declared shape is not backed by data, weights of another type. Every
// case must end with an Error that names the culprit, quickly and without reading what it declares.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "random_models.hpp"
#include "surrogate/flare.hpp"
#include "surrogate/model.hpp"

namespace st = surrogate::testing;
using surrogate::Error;
using surrogate::ErrorCode;
using surrogate::ModelFile;

namespace {

class HostileModelFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("surrogate_hostile_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    cfg_.in_dim = 3;
    cfg_.out_dim = 2;
    cfg_.channel_dim = 16;
    cfg_.num_heads = 2;
    cfg_.num_latents = 4;
    cfg_.num_blocks = 2;
    cfg_.in_proj_hidden_dim = cfg_.out_proj_hidden_dim = cfg_.k_proj_hidden_dim = cfg_.v_proj_hidden_dim =
        cfg_.ffn_hidden_dim = 16;
    file_ = st::random_flare_file(cfg_, 5);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  /// Writes the valid file, lets `edit` change it with the HDF5 C API (file id), returns the path.
  std::string edited(const std::string& name, const std::function<void(hid_t)>& edit, const ModelFile* base = nullptr) {
    const std::string p = (dir_ / name).string();
    (base ? *base : file_).write(p);
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    EXPECT_GE(f, 0);
    edit(f);
    H5Fclose(f);
    return p;
  }

  /// Reads and builds the model; returns the error (failing the test when there is none or it is slow).
  Error load_error(const std::string& p) {
    const auto start = std::chrono::steady_clock::now();
    try {
      auto model = surrogate::make_model(ModelFile::read(p));
    } catch (const Error& e) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      EXPECT_LT(seconds, 5.0) << p << ": the error took " << seconds << " s";
      return e;
    }
    ADD_FAILURE() << "no error for " << p;
    return Error(ErrorCode::ok, "");
  }

  std::filesystem::path dir_;
  surrogate::flare::Config cfg_{};
  ModelFile file_;
};

void expect_mentions(const Error& e, std::initializer_list<const char*> words) {
  for (const char* w : words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << "'" << w << "' not in: " << e.what();
}

/// An attribute `name` on `object` (replacing any) of `type`, with `dims` (empty: scalar), from `data`.
void put_attribute(hid_t object, const char* name, hid_t type, std::vector<hsize_t> dims, const void* data) {
  if (H5Aexists(object, name) > 0) H5Adelete(object, name);
  const hid_t space = dims.empty() ? H5Screate(H5S_SCALAR)
                                   : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t attr = H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(attr, 0);
  EXPECT_GE(H5Awrite(attr, type, data), 0);
  H5Aclose(attr);
  H5Sclose(space);
}

/// The enum h5py writes for numpy booleans: int8 with FALSE = 0, TRUE = 1.
hid_t bool_enum() {
  const hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
  std::int8_t v = 0;
  H5Tenum_insert(t, "FALSE", &v);
  v = 1;
  H5Tenum_insert(t, "TRUE", &v);
  return t;
}

void on_config(hid_t file, const std::function<void(hid_t)>& edit) {
  const hid_t g = H5Gopen2(file, "config", H5P_DEFAULT);
  edit(g);
  H5Gclose(g);
}

TEST_F(HostileModelFile, BooleanEnumAttributesAreReadWhole) {
  // A 64-element boolean array anywhere (here an extra /config attribute) and a scalar boolean flag.
  const std::string p = edited("bools.h5", [](hid_t f) {
    on_config(f, [](hid_t g) {
      const hid_t t = bool_enum();
      std::vector<std::int8_t> many(64, 1);
      put_attribute(g, "extra_flags", t, {64}, many.data());
      const std::int8_t no = 0;
      put_attribute(g, "rmsnorm", t, {}, &no);
      H5Tclose(t);
    });
  });
  const ModelFile m = ModelFile::read(p);
  EXPECT_EQ(m.config.get_int_list("extra_flags"), std::vector<std::int64_t>(64, 1));
  EXPECT_FALSE(m.config.get_bool("rmsnorm"));
  EXPECT_NO_THROW(surrogate::make_model(m));
}

TEST_F(HostileModelFile, ArraysWhereScalarsAreExpectedAreRefusedByName) {
  Error e = load_error(edited("rms_array.h5", [](hid_t f) {
    on_config(f, [](hid_t g) {
      const hid_t t = bool_enum();
      std::vector<std::int8_t> many(64, 0);
      put_attribute(g, "rmsnorm", t, {64}, many.data());
      H5Tclose(t);
    });
  }));
  EXPECT_EQ(e.code(), ErrorCode::format);
  expect_mentions(e, {"'rmsnorm'", "/config", "must be an integer"});
  e = load_error(edited("version_array.h5", [](hid_t f) {
    const std::int64_t v[3] = {1, 1, 1};
    put_attribute(f, "format_version", H5T_NATIVE_INT64, {3}, v);
  }));
  EXPECT_EQ(e.code(), ErrorCode::format);
  expect_mentions(e, {"'format_version'", "root", "must be an integer", "[1, 1, 1]"});
}

TEST_F(HostileModelFile, AttributeClassRankAndRangeAreChecked) {
  struct Case {
    const char* name;
    std::function<void(hid_t)> edit;
    std::vector<const char*> words;
  };
  const std::uint64_t huge = 0xFFFFFFFFFFFFFFF0ull;
  const std::int64_t matrix[4] = {1, 2, 3, 4};
  const Case cases[] = {
      {"2d", [&](hid_t g) { put_attribute(g, "num_blocks", H5T_NATIVE_INT64, {2, 2}, matrix); },
       {"'num_blocks'", "2-D array"}},
      {"u64", [&](hid_t g) { put_attribute(g, "num_blocks", H5T_NATIVE_UINT64, {}, &huge); },
       {"'num_blocks'", "signed 64-bit"}},
      {"opaque", [&](hid_t g) {
         const hid_t t = H5Tcreate(H5T_OPAQUE, 4);
         const std::int32_t v = 1;
         put_attribute(g, "qk_norm", t, {}, &v);
         H5Tclose(t);
       }, {"'qk_norm'", "unsupported attribute type (opaque)"}},
  };
  for (const Case& c : cases) {
    const Error e = load_error(edited(std::string("attr_") + c.name + ".h5", [&](hid_t f) { on_config(f, c.edit); }));
    EXPECT_EQ(e.code(), ErrorCode::format) << c.name;
    for (const char* w : c.words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << c.name << ": " << e.what();
  }
}

TEST_F(HostileModelFile, AbsurdSizesFailFastBeforeAllocating) {
  struct Case {
    const char* attribute;
    surrogate::AttributeValue value;
    ErrorCode code;
    std::vector<const char*> words;
  };
  const Case cases[] = {
      // 2^24 blocks: refused against the tensors present, before 2^24 blocks of shapes are listed.
      {"num_blocks", std::int64_t{1} << 24, ErrorCode::weights, {"num_blocks = 16777216", "holds only"}},
      // 2^32 + 16 must not be read as 16.
      {"channel_dim", (std::int64_t{1} << 32) + 16, ErrorCode::format, {"'channel_dim'", "4294967312"}},
      {"layernorm_eps", std::numeric_limits<double>::infinity(), ErrorCode::format, {"'layernorm_eps'", "finite"}},
      {"attn_scale", std::numeric_limits<double>::quiet_NaN(), ErrorCode::format, {"'attn_scale'", "finite"}},
  };
  for (const Case& c : cases) {
    ModelFile f = file_;
    f.config.set(c.attribute, c.value);
    const Error e = load_error(edited(std::string("size_") + c.attribute + ".h5", [](hid_t) {}, &f));
    EXPECT_EQ(e.code(), c.code) << c.attribute << ": " << e.what();
    for (const char* w : c.words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
  }
}

TEST_F(HostileModelFile, DeclaredShapesAreCheckedBeforeReading) {
  auto add_dataset = [](hid_t f, const char* name, hid_t type, std::vector<hsize_t> dims, bool write) {
    const hid_t g = H5Gopen2(f, "weights", H5P_DEFAULT);
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    std::vector<hsize_t> chunk(dims.size(), 1);
    chunk.back() = std::min<hsize_t>(dims.back(), 1024);
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    const hid_t d = H5Dcreate2(g, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    EXPECT_GE(d, 0) << name;
    if (write) {
      const std::vector<float> small(64, 1.0f);
      const hsize_t count[1] = {64};
      const hid_t mem = H5Screate_simple(1, count, nullptr);
      const hsize_t start[1] = {0};
      H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
      EXPECT_GE(H5Dwrite(d, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, small.data()), 0);
      H5Sclose(mem);
    }
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Gclose(g);
  };
  // 8 GB declared, 64 values written: refused from the declared shape and the stored bytes.
  Error e = load_error(edited("eight_gb.h5", [&](hid_t f) { add_dataset(f, "huge", H5T_IEEE_F32LE, {2000000000ull}, true); }));
  EXPECT_EQ(e.code(), ErrorCode::format);
  expect_mentions(e, {"/weights/huge", "(2000000000,)", "not backed"});
  // 40 GB declared: above the per-tensor limit.
  e = load_error(edited("forty_gb.h5", [&](hid_t f) { add_dataset(f, "huge", H5T_IEEE_F32LE, {10000000000ull}, true); }));
  EXPECT_EQ(e.code(), ErrorCode::format);
  expect_mentions(e, {"/weights/huge", "(10000000000,)", "exceeds the accepted maximum"});
  // An element count that overflows int64.
  e = load_error(edited("overflow.h5", [&](hid_t f) {
    add_dataset(f, "overflow", H5T_IEEE_F32LE, {std::uint64_t{1} << 40, std::uint64_t{1} << 40}, false);
  }));
  EXPECT_EQ(e.code(), ErrorCode::format);
  expect_mentions(e, {"/weights/overflow", "exceeds the accepted maximum"});
  // Nine dimensions.
  e = load_error(edited("rank9.h5", [&](hid_t f) { add_dataset(f, "rank9", H5T_IEEE_F32LE, std::vector<hsize_t>(9, 1), false); }));
  expect_mentions(e, {"/weights/rank9", "9 dimensions"});
}

TEST_F(HostileModelFile, WeightsOfAnotherTypeAreRefusedByName) {
  auto retype = [](hid_t file_type) {
    return [file_type](hid_t f) {
      const char* key = "in_proj.fc1.bias";
      const hid_t g = H5Gopen2(f, "weights", H5P_DEFAULT);
      H5Ldelete(g, key, H5P_DEFAULT);
      const hsize_t dims[1] = {16};
      const hid_t space = H5Screate_simple(1, dims, nullptr);
      const hid_t d = H5Dcreate2(g, key, file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      const std::vector<std::int32_t> ones(16, 1);
      H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, ones.data());
      H5Dclose(d);
      H5Sclose(space);
      H5Gclose(g);
    };
  };
  Error e = load_error(edited("int32.h5", retype(H5T_STD_I32LE)));
  EXPECT_EQ(e.code(), ErrorCode::format);
  expect_mentions(e, {"/weights/in_proj.fc1.bias", "32-bit integers"});
  const hid_t half = H5Tcopy(H5T_IEEE_F32LE);
  H5Tset_fields(half, 15, 10, 5, 0, 10);
  H5Tset_size(half, 2);
  H5Tset_ebias(half, 15);
  e = load_error(edited("float16.h5", retype(half)));
  H5Tclose(half);
  EXPECT_EQ(e.code(), ErrorCode::format);
  expect_mentions(e, {"/weights/in_proj.fc1.bias", "16-bit floats"});
}

}  // namespace
