// A throwaway HDFS for the data-source tests (issue 19): Apache Hadoop's MiniDFSCluster
// (one NameNode, one DataNode), every address on 127.0.0.1, WebHDFS on, its data under the
// folder given. Built by build.sh beside this file into ~/.cache/tfkube; started and
// stopped (SIGTERM, by PID) by minihdfs.py.
//
// Usage: java -cp <build.sh --print-classpath> MiniHdfs BASE_DIR RPC_PORT HTTP_PORT
// Prints "tfkube-hdfs: ready rpc=<port> http=<port>" once the DataNode has registered.

import java.io.File;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.MiniDFSCluster;

public final class MiniHdfs {
  private MiniHdfs() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: MiniHdfs BASE_DIR RPC_PORT HTTP_PORT");
      System.exit(2);
    }
    File base = new File(args[0]).getAbsoluteFile();
    int rpcPort = Integer.parseInt(args[1]);
    int httpPort = Integer.parseInt(args[2]);
    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base.getPath());
    conf.set("hadoop.tmp.dir", new File(base, "tmp").getPath());
    // Loopback only: the NameNode, the DataNode's data, HTTP and IPC ports, and the name
    // the DataNode registers under (what WebHDFS redirects reads and writes to).
    conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
    conf.set("dfs.namenode.http-address", "127.0.0.1:" + httpPort);
    conf.set("dfs.namenode.http-bind-host", "127.0.0.1");
    conf.set("dfs.datanode.address", "127.0.0.1:0");
    conf.set("dfs.datanode.http.address", "127.0.0.1:0");
    conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
    conf.set("dfs.datanode.hostname", "127.0.0.1");
    conf.setBoolean("dfs.webhdfs.enabled", true);
    conf.setBoolean("dfs.permissions.enabled", true);
    conf.set("hadoop.security.authentication", "simple");
    MiniDFSCluster cluster =
        new MiniDFSCluster.Builder(conf)
            .nameNodePort(rpcPort)
            .nameNodeHttpPort(httpPort)
            .numDataNodes(1)
            .format(true)
            .build();
    Runtime.getRuntime().addShutdownHook(new Thread(cluster::shutdown));
    cluster.waitActive();
    // Permissions stay on; the root is like /tmp (anyone may make a folder there, only its
    // owner changes it), so the tests' WebHDFS user fills its own tree.
    cluster.getFileSystem().setPermission(new Path("/"), new FsPermission((short) 01777));
    System.out.println(
        "tfkube-hdfs: ready rpc="
            + cluster.getNameNodePort()
            + " http="
            + cluster.getNameNode().getHttpAddress().getPort());
    System.out.flush();
    Thread.currentThread().join(); // until SIGTERM: the hook shuts the cluster down
  }
}
