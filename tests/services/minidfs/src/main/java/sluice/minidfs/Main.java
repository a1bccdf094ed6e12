// Starts a MiniDFSCluster for sluice's HDFS tests, writes the client configuration
// (core-site.xml, hdfs-site.xml) for it, prints "Ready!" and stays up until killed
// (or, with --stop-on-eof, until its standard input closes; with --exit-with PID,
// until that process exits). With --control FIFO it takes commands, one a line, from
// that named pipe: `restart-namenode` restarts the namenode(s) on the same ports and
// data, waits until the datanodes are back and prints "Restarted namenode: N" (the
// N-th restart), or "Control failed: WHY"; `restart-datanode` restarts the first
// datanode on another port and prints "Restarted datanode: N". With --secure-dir DIR it is Kerberized
// (see Secure): a MiniKdc, keytabs and krb5.conf in DIR, the client's krb5.conf
// beside the Hadoop files, and the user principal printed as "Principal: NAME".
// With --kdc-only (and --secure-dir DIR) it runs the MiniKdc alone, for services
// of the tests other than HDFS: see Secure.serveKdcOnly.
package sluice.minidfs;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.MiniDFSNNTopology;

public final class Main {
    /** The HA nameservice id clients use: hdfs://ns/... */
    static final String NAMESERVICE = "ns";
    /** The viewfs mount table of the plain cluster: viewfs://sluice/... */
    static final String VIEWFS = "sluice";

    /** Command-line options, all with defaults. */
    static final class Options {
        File baseDir = new File("minidfs-data");
        File confDir = new File("conf");
        int port = 9000;
        int dataNodes = 1;
        long blockSize = 1024 * 1024;
        boolean ha = false;
        boolean stopOnEof = false;
        long exitWith = -1;
        File secureDir = null;
        String protection = "privacy";
        long ticketLifetime = 60;
        File control = null;
        boolean kdcOnly = false;
        String dataNodeAddress = null;

        static Options parse(String[] args) {
            Options o = new Options();
            for (int i = 0; i < args.length; i++) {
                String arg = args[i];
                switch (arg) {
                    case "--base-dir": o.baseDir = new File(value(args, ++i, arg)); break;
                    case "--conf-dir": o.confDir = new File(value(args, ++i, arg)); break;
                    case "--port": o.port = Integer.parseInt(value(args, ++i, arg)); break;
                    case "--datanodes": o.dataNodes = Integer.parseInt(value(args, ++i, arg)); break;
                    case "--block-size": o.blockSize = Long.parseLong(value(args, ++i, arg)); break;
                    case "--ha": o.ha = true; break;
                    case "--stop-on-eof": o.stopOnEof = true; break;
                    case "--exit-with": o.exitWith = Long.parseLong(value(args, ++i, arg)); break;
                    case "--secure-dir": o.secureDir = new File(value(args, ++i, arg)); break;
                    case "--protection": o.protection = value(args, ++i, arg); break;
                    case "--ticket-lifetime": o.ticketLifetime = Long.parseLong(value(args, ++i, arg)); break;
                    case "--control": o.control = new File(value(args, ++i, arg)); break;
                    case "--kdc-only": o.kdcOnly = true; break;
                    case "--datanode-address": o.dataNodeAddress = value(args, ++i, arg); break;
                    default: throw new IllegalArgumentException("unknown option " + arg);
                }
            }
            return o;
        }

        private static String value(String[] args, int i, String name) {
            if (i >= args.length) {
                throw new IllegalArgumentException(name + " needs a value");
            }
            return args[i];
        }
    }

    public static void main(String[] args) throws Exception {
        Options options = Options.parse(args);
        if (options.exitWith > 0) {
            // The process that owns this cluster: when it goes, so do we.
            ProcessHandle owner = ProcessHandle.of(options.exitWith)
                .orElseThrow(() -> new IllegalArgumentException(
                    "--exit-with: no process " + options.exitWith));
            owner.onExit().thenRun(() -> System.exit(0));
        }
        if (options.kdcOnly) {
            if (options.secureDir == null) {
                throw new IllegalArgumentException("--kdc-only needs --secure-dir");
            }
            Secure.serveKdcOnly(options.secureDir, options.confDir, options.ticketLifetime);
            return;
        }
        Configuration conf = new HdfsConfiguration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, options.baseDir.getAbsolutePath());
        conf.setLong("dfs.blocksize", options.blockSize);
        conf.setInt("dfs.replication", Math.min(3, options.dataNodes));
        conf.setLong("dfs.heartbeat.interval", 1);
        // The clients under test speak RPC only; WebHDFS's Jersey set-up costs seconds.
        conf.setBoolean("dfs.webhdfs.enabled", false);
        if (options.dataNodeAddress != null) {
            // The datanode listens there; the namenode still hands clients the
            // address the datanode registered from (127.0.0.1) and this port,
            // so a proxy on 127.0.0.1 and the port stands between them.
            conf.set("dfs.datanode.address", options.dataNodeAddress);
            // Kept as configured too: any free port, not the fixed defaults.
            String host = options.dataNodeAddress.substring(0, options.dataNodeAddress.lastIndexOf(':'));
            conf.set("dfs.datanode.http.address", host + ":0");
            conf.set("dfs.datanode.ipc.address", host + ":0");
        }
        Secure secure = null;
        if (options.secureDir != null) {
            secure = Secure.start(options.secureDir, options.protection, options.ticketLifetime);
            secure.configureServer(conf);
        }

        MiniDFSNNTopology topology = options.ha
            ? new MiniDFSNNTopology().addNameservice(
                new MiniDFSNNTopology.NSConf(NAMESERVICE)
                    .addNN(new MiniDFSNNTopology.NNConf("nn1").setIpcPort(options.port))
                    .addNN(new MiniDFSNNTopology.NNConf("nn2").setIpcPort(options.port + 1)))
            : MiniDFSNNTopology.simpleSingleNN(options.port, 0);

        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
            .nnTopology(topology)
            .numDataNodes(options.dataNodes)
            .checkDataNodeAddrConfig(options.dataNodeAddress != null)
            .format(true)
            .build();
        final Secure kdc = secure;
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            cluster.shutdown();
            if (kdc != null) {
                kdc.stop();
            }
        }, "minidfs-shutdown"));
        if (options.ha) {
            cluster.transitionToActive(0);
        }
        cluster.waitActive();

        writePrivateDir(cluster);
        if (secure != null) {
            // Where the tests' user writes (the superuser is hdfs, not the user).
            FileSystem fs = cluster.getFileSystem(0);
            Path shared = new Path("/sluice-tests");
            fs.mkdirs(shared);
            fs.setPermission(shared, new FsPermission((short) 01777));
        }
        writeClientConf(cluster, options, secure);
        if (secure != null) {
            System.out.println("Principal: " + secure.userPrincipal());
        }
        if (options.control != null) {
            serveControl(options.control, cluster, options.ha);
        }
        System.out.println("Ready!");
        System.out.flush();

        if (options.stopOnEof) {
            BufferedReader in = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8));
            while (in.readLine() != null) {
                // Any line is ignored; only the end of input stops the cluster.
            }
            System.exit(0);
        } else {
            new CountDownLatch(1).await();
        }
    }

    /**
     * Serves the commands written to the named pipe fifo, in a daemon thread (see the
     * top of this file). A writer opens the pipe, writes its lines and closes it; the
     * next writer finds it open again.
     */
    static void serveControl(File fifo, MiniDFSCluster cluster, boolean ha) {
        Thread thread = new Thread(() -> {
            int restarts = 0;
            while (true) {
                try (BufferedReader in = new BufferedReader(new InputStreamReader(
                        new FileInputStream(fifo), StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = in.readLine()) != null) {
                        String command = line.trim();
                        if (command.isEmpty()) {
                            continue;
                        }
                        try {
                            if (command.equals("restart-datanode")) {
                                // On another port: what a client kept of its
                                // address no longer reaches it.
                                if (!cluster.restartDataNode(0, false)) {
                                    throw new IllegalStateException("no datanode to restart");
                                }
                                cluster.waitActive();
                                restarts++;
                                System.out.println("Restarted datanode: " + restarts);
                                System.out.flush();
                                continue;
                            }
                            if (!command.equals("restart-namenode")) {
                                throw new IllegalArgumentException("unknown command " + command);
                            }
                            for (int i = 0; i < cluster.getNumNameNodes(); i++) {
                                cluster.restartNameNode(i, false);
                            }
                            if (ha) {
                                cluster.transitionToActive(0);
                            }
                            cluster.waitActive();
                            restarts++;
                            System.out.println("Restarted namenode: " + restarts);
                        } catch (Exception e) {
                            System.out.println("Control failed: " + e.toString().replace('\n', ' '));
                        }
                        System.out.flush();
                    }
                } catch (IOException e) {
                    System.out.println("Control failed: " + e.toString().replace('\n', ' '));
                    System.out.flush();
                    return;
                }
            }
        }, "minidfs-control");
        thread.setDaemon(true);
        thread.start();
    }

    /**
     * Creates /sluice-private (mode 700, owned by the user running the cluster, who is
     * its superuser) holding one file, so tests can check what another user is told.
     */
    static void writePrivateDir(MiniDFSCluster cluster) throws IOException {
        FileSystem fs = cluster.getFileSystem(0);
        Path dir = new Path("/sluice-private");
        fs.mkdirs(dir);
        fs.setPermission(dir, new FsPermission((short) 0700));
        try (FSDataOutputStream out = fs.create(new Path(dir, "part-00000.csv"))) {
            out.write("id\n0\n".getBytes(StandardCharsets.UTF_8));
        }
    }

    /** Writes what a client needs to reach this cluster into options.confDir. */
    static void writeClientConf(MiniDFSCluster cluster, Options options, Secure secure)
            throws IOException {
        Map<String, String> core = new LinkedHashMap<>();
        Map<String, String> hdfs = new LinkedHashMap<>();
        hdfs.put("dfs.blocksize", Long.toString(options.blockSize));
        hdfs.put("dfs.replication", Integer.toString(Math.min(3, options.dataNodes)));
        if (options.ha) {
            core.put("fs.defaultFS", "hdfs://" + NAMESERVICE);
            List<String> ids = new ArrayList<>();
            for (int i = 0; i < 2; i++) {
                String id = "nn" + (i + 1);
                ids.add(id);
                InetSocketAddress addr = cluster.getNameNode(i).getNameNodeAddress();
                hdfs.put("dfs.namenode.rpc-address." + NAMESERVICE + "." + id,
                    "127.0.0.1:" + addr.getPort());
            }
            hdfs.put("dfs.nameservices", NAMESERVICE);
            hdfs.put("dfs.ha.namenodes." + NAMESERVICE, String.join(",", ids));
            hdfs.put("dfs.client.failover.proxy.provider." + NAMESERVICE,
                "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider");
        } else {
            String hdfs0 = "hdfs://127.0.0.1:" + cluster.getNameNodePort();
            core.put("fs.defaultFS", hdfs0);
            // A viewfs mount table over the same namespace: viewfs://sluice/warehouse/x
            // is hdfs://.../sluice-tests/x, and everything else falls through to /.
            core.put("fs.viewfs.mounttable." + VIEWFS + ".link./warehouse", hdfs0 + "/sluice-tests");
            core.put("fs.viewfs.mounttable." + VIEWFS + ".linkFallback", hdfs0 + "/");
        }
        if (!options.confDir.isDirectory() && !options.confDir.mkdirs()) {
            throw new IOException("cannot create " + options.confDir);
        }
        if (secure != null) {
            secure.clientConf(core, hdfs);
            secure.writeKrb5Conf(new File(options.confDir, "krb5.conf"));
        }
        writeXml(new File(options.confDir, "core-site.xml"), core);
        writeXml(new File(options.confDir, "hdfs-site.xml"), hdfs);
    }

    /** Writes a Hadoop configuration file with exactly these properties. */
    static void writeXml(File file, Map<String, String> properties) throws IOException {
        Configuration out = new Configuration(false);
        properties.forEach(out::set);
        File tmp = new File(file.getPath() + ".tmp");
        try (OutputStream stream = new FileOutputStream(tmp)) {
            out.writeXml(stream);
        }
        if (!tmp.renameTo(file)) {
            throw new IOException("cannot rename " + tmp + " to " + file);
        }
    }

    private Main() {}
}
